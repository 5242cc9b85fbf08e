"""The README and docs/ work as written: every shell command of their code blocks that starts with
`.venv/bin/`, `PATH=$PWD/.venv/bin` or `printf` (the ones that need nothing but `make setup`;
`make` targets and benchmarks are left to their own tests) runs in a fresh shell, from the
repository's root, with the venv not on PATH, and exits 0. A transcript in docs/ (`$ command`
followed by its output) must show the real output. No document may point outside the repository."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
from pathlib import Path

import pytest

from tests import ROOT

DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
#: How a runnable command starts (after an optional "$ " prompt).
RUNNABLE = (".venv/bin/", "PATH=$PWD/.venv/bin", "printf ")
VENV_BIN = ROOT / ".venv" / "bin"


def commands(path: Path) -> list[tuple[str, list[str] | None]]:
    """The runnable commands of a document's code blocks, each with its transcript output (the
    lines after a `$ command` up to a blank line), or None when it is not a transcript."""
    lines = path.read_text().splitlines()
    found, fenced, index = [], None, 0
    while index < len(lines):
        line = lines[index]
        index += 1
        if line.lstrip().startswith("```"):
            fenced = None if fenced is not None else line.strip("` ")
            continue
        text = line.strip()
        prompt = text.startswith("$ ")
        text = text.removeprefix("$ ")
        in_code = fenced in (None, "sh", "bash", "console") and line.startswith("    ")
        if not in_code or not text.startswith(RUNNABLE):
            continue
        while not _complete(text) and index < len(lines):  # a quoted argument or a \ continues it
            text = text + "\n" + lines[index].strip()
            index += 1
        output = None
        if prompt:
            output = []
            while index < len(lines) and lines[index].strip():
                output.append(lines[index].removeprefix("    "))
                index += 1
        found.append((text, output))
    return found


def _complete(text: str) -> bool:
    if text.endswith("\\"):
        return False
    try:
        shlex.split(text, comments=True)
    except ValueError:
        return False
    return True


def fresh_environment() -> dict[str, str]:
    """This process's environment without any venv on PATH and without crs-bridge settings."""
    env = {key: value for key, value in os.environ.items() if not key.startswith(("CRS_BRIDGE_", "VIRTUAL_ENV"))}
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep) if not Path(p, "activate").exists())
    return env


CASES = [
    pytest.param(path, command, output, id=f"{path.name}:{command.splitlines()[0][:60].strip()}")
    for path in DOCUMENTS
    for command, output in commands(path)
]


def test_the_documents_have_runnable_commands():
    assert len([case for case in CASES if case.values[0].name == "README.md"]) >= 8
    assert {case.values[0].name for case in CASES} >= {"README.md", "rpc.md"}


@pytest.fixture(scope="module")
def scratch(tmp_path_factory) -> Path:
    """The module's stand-in for /tmp: the commands share it, as a reader's shell shares /tmp
    (a flight record written by one command is read by the next)."""
    return tmp_path_factory.mktemp("tmp")


@pytest.mark.skipif(not (VENV_BIN / "crs-bridge").exists(), reason="needs `make setup` (.venv/bin/crs-bridge)")
@pytest.mark.parametrize(("path", "command", "output"), CASES)
def test_command_runs_as_written(path, command, output, scratch):
    """Each command as written, but with /tmp (named, or as TMPDIR) the test's own folder."""
    env = {**fresh_environment(), "TMPDIR": str(scratch)}
    done = subprocess.run(
        ["bash", "-c", re.sub(r"/tmp\b", str(scratch), command)],
        capture_output=True, text=True, cwd=ROOT, env=env, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, f"{command}\n{done.stderr}"
    if output is not None and path.parent.name == "docs":
        assert done.stdout.splitlines() == output


@pytest.mark.parametrize("path", DOCUMENTS, ids=lambda p: p.name)
def test_no_command_needs_the_venv_on_path(path):
    """A bare `crs-bridge ...` or `perl ...` (the Perl client starts `crs-bridge` from PATH) would
    fail in a fresh shell, and the runnable-command test would not even see it."""
    assert re.findall(r"^ {4,}(?:\$ )?(?:crs-bridge|perl) .*", path.read_text(), re.M) == []


@pytest.mark.parametrize("path", DOCUMENTS, ids=lambda p: p.name)
def test_nothing_points_outside_the_repository(path):
    text = path.read_text()
    assert "shared/spec" not in text
    for target in re.findall(r"\]\(([^)#]+)", text):
        if "://" in target:
            continue
        resolved = (path.parent / target).resolve()
        assert resolved.is_relative_to(ROOT) and resolved.exists(), target
