"""The PYTHONPATH entry that makes a source tree importable as ``crs_bridge`` on its own.

A tree keeps ``core/`` and ``bridge/`` beside ``crs_bridge/``; installed, they are
``crs_bridge.core`` and ``crs_bridge.bridge`` (pyproject.toml's package-dir). Older trees held
links ``crs_bridge/core`` and ``crs_bridge/bridge``, and are their own entry. For a tree without
them, a temporary folder gets a ``crs_bridge`` of links to the tree's files, ``core`` and
``bridge``: the benchmarks run each tree's own code, never the editable install's.
"""

from __future__ import annotations

import atexit
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
    package.mkdir()
    for entry in (tree / "crs_bridge").iterdir():
        if entry.name != "__pycache__":
            (package / entry.name).symlink_to(entry)
    (package / "core").symlink_to(tree / "core")
    (package / "bridge").symlink_to(tree / "bridge")
    return str(farm)
