"""The PYTHONPATH entry that makes a source tree importable as ``crs_bridge`` on its own.

A tree keeps ``core/`` and ``bridge/`` beside ``crs_bridge/``; installed, they are
``crs_bridge.core`` and ``crs_bridge.bridge`` (pyproject.toml's package-dir). Older trees held
links ``crs_bridge/core`` and ``crs_bridge/bridge``, and are their own entry. For a tree without
them, a temporary folder gets a copy of the tree's ``crs_bridge`` (compiled: with
PYTHONDONTWRITEBYTECODE set, a server would otherwise compile it at every start) with links to its
``core`` and ``bridge``: the benchmarks run each tree's own code, never the editable install's.
"""

from __future__ import annotations

import atexit
import compileall
import shutil
import tempfile
from pathlib import Path


def python_path(tree: Path | str) -> str:
    """A PYTHONPATH entry under which ``crs_bridge``, ``crs_bridge.core`` and ``crs_bridge.bridge``
    are ``tree``'s own."""
    tree = Path(tree).resolve()
    if (tree / "crs_bridge" / "core").exists():
        return str(tree)
    farm = Path(tempfile.mkdtemp(prefix="crs-bridge-tree-"))
    atexit.register(shutil.rmtree, farm, ignore_errors=True)
    package = farm / "crs_bridge"
    shutil.copytree(tree / "crs_bridge", package, ignore=shutil.ignore_patterns("__pycache__"))
    compileall.compile_dir(package, quiet=1)
    (package / "core").symlink_to(tree / "core")
    (package / "bridge").symlink_to(tree / "bridge")
    return str(farm)
