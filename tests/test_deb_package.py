"""The Debian package on a throwaway Debian root.

`debian/build-deb` builds the package; `debootstrap` makes a minimal Debian root (bookworm: perl
5.36, Python 3.11; CRS_BRIDGE_DEB_SUITE=trixie: perl 5.40, Python 3.13), which every command
enters through an overlay in a mount namespace of its own (`unshare`), so nothing outside the
test's folder changes. Beside crs-bridge go stand-ins built here: `libpve-rs-perl` 0.13.0 owning
the two binding modules (recognisable content) and `pve-ha-manager` 5.2.0 (for the formula
check), plus stand-in `systemctl`/`deb-systemd-invoke` that record what the maintainer scripts
ask of systemd. Then: install, an HA-style round in the daemon's conditions, `crs-bridge
doctor`, and removal, which must put the binding's files back byte for byte.

Needs root, debootstrap, dpkg-deb and the Debian and Python package registries; skipped
otherwise, unless CRS_BRIDGE_DEB_TEST=require (CI), when that is a failure.
CRS_BRIDGE_DEB_ROOT=DIR uses an existing root instead of debootstrapping one (left unchanged).
The tests run in file order: each one takes the root as the one before left it.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SUITE = os.environ.get("CRS_BRIDGE_DEB_SUITE", "bookworm")
BINDING_DIR = "/usr/share/perl5/PVE/RS/ResourceScheduling"
BINDING_FILES = [f"{BINDING_DIR}/Static.pm", f"{BINDING_DIR}/Dynamic.pm"]
DAEMON_PATH = "/sbin:/bin:/usr/sbin:/usr/bin"
#: What a root shell and apt get (apt and dpkg want the sbin folders).
ROOT_ENV = {
    "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "HOME": "/root",
    "LC_ALL": "C.UTF-8",
    "DEBIAN_FRONTEND": "noninteractive",
}
#: The Python tree of the root's interpreter, in a root shell.
PYTHON_TREE = "/usr/lib/crs-bridge/python$(python3 -c \"import sys; print('%d.%d' % sys.version_info[:2])\")"
#: The HA-style round, as the daemon runs it: perl -T, clean environment, stdio on /dev/null;
#: its report comes on fd 3, which this shell sends to its stdout.
ROUND = f"env -i PATH={DAEMON_PATH} perl -T {PYTHON_TREE}/crs_bridge/ha_round.pl 3>&1 >/dev/null 2>&1 </dev/null"

_TOOLS = ("debootstrap", "dpkg-deb", "dpkg-parsechangelog", "unshare", "chroot")
_missing = [tool for tool in _TOOLS if shutil.which(tool) is None] + (["root"] if os.geteuid() != 0 else [])
if _missing and os.environ.get("CRS_BRIDGE_DEB_TEST") != "require":
    pytest.skip(f"the package test needs {', '.join(_missing)}", allow_module_level=True)


class Root:
    """A Debian root seen through an overlay: ``run`` enters it (its changes go to ``upper``);
    ``share`` is the host folder it sees as /mnt."""

    _ENTER = (
        'mount -t overlay overlay -o "lowerdir=$1,upperdir=$2,workdir=$3" "$4" && mount -t proc proc "$4/proc" '
        '&& mount --bind "$5" "$4/mnt" && exec chroot "$4" /bin/sh -c "$6"'
    )

    def __init__(self, lower: Path, work: Path) -> None:
        self.lower = lower
        self.dirs = {name: work / name for name in ("upper", "overlay-work", "merged", "share")}
        for folder in self.dirs.values():
            folder.mkdir(parents=True)
        self.share = self.dirs["share"]
        self.deb: Path | None = None  # the crs-bridge package, in share
        self.binding: dict[str, str] = {}  # the stand-in binding's files: path -> sha256

    def run(self, script: str, check: bool = True) -> subprocess.CompletedProcess:
        d = self.dirs
        command = ["unshare", "--mount", "--pid", "--fork", "sh", "-c", self._ENTER, "enter", str(self.lower)]
        command += [str(d["upper"]), str(d["overlay-work"]), str(d["merged"]), str(d["share"]), script]
        done = subprocess.run(command, env=ROOT_ENV, capture_output=True, text=True, check=False, timeout=600)
        if check and done.returncode != 0:
            pytest.fail(f"in the root: {script}\nexit {done.returncode}\n{done.stdout}\n{done.stderr}")
        return done

    def read(self, path: str) -> bytes:
        """A file of the root as it is now (the overlay's upper layer over the lower)."""
        for layer in (self.dirs["upper"], self.lower):
            candidate = layer / path.lstrip("/")
            if candidate.exists() or candidate.is_symlink():
                return candidate.read_bytes()
        raise FileNotFoundError(path)

    def sha256(self, path: str) -> str:
        return hashlib.sha256(self.read(path)).hexdigest()


def build_stand_in(folder: Path, name: str, version: str, files: dict[str, str]) -> Path:
    """A binary package ``name`` owning ``files`` (path -> text), built with dpkg-deb."""
    tree = folder / f"{name}-tree"
    (tree / "DEBIAN").mkdir(parents=True)
    control = (
        f"Package: {name}\nVersion: {version}\nArchitecture: all\nMaintainer: crs-bridge tests <tests@example.org>\n"
    )
    (tree / "DEBIAN/control").write_text(control + f"Description: stand-in for {name} (crs-bridge package test)\n")
    for path, text in files.items():
        target = tree / path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
    deb = folder / f"{name}_{version}_all.deb"
    subprocess.run(["dpkg-deb", "--root-owner-group", "--build", str(tree), str(deb)], check=True, capture_output=True)
    return deb


def stand_in_binding(module: str) -> str:
    """A module as recognisable as libpve-rs-perl's generated one, which cannot schedule."""
    return textwrap.dedent(f"""\
        package PVE::RS::ResourceScheduling::{module};
        # Stand-in for libpve-rs-perl 0.13.0's generated binding module (crs-bridge package test).
        use strict;
        use warnings;
        our $STAND_IN = 'libpve-rs-perl stand-in {module}';
        sub new {{ die "stand-in binding: no scheduler here\\n" }}
        1;
        """)


#: systemctl and deb-systemd-invoke as the maintainer scripts see them (in /usr/sbin, first on
#: apt's PATH): pve-ha-crm is active while /run/pve-ha-crm.active exists; every restart asked
#: for is written to /run/restarts.
FAKE_SYSTEMCTL = """#!/bin/sh
[ "$*" = "--quiet is-active pve-ha-crm.service" ] && [ -e /run/pve-ha-crm.active ]
"""
FAKE_INVOKE = """#!/bin/sh
echo "$*" >> /run/restarts
"""


@pytest.fixture(scope="module")
def debian_root(tmp_path_factory):
    """A Debian root (debootstrap'd here, or CRS_BRIDGE_DEB_ROOT) with the packages to install in
    /mnt; the folder is removed afterwards, whatever the outcome."""
    work = tmp_path_factory.mktemp("deb")
    try:
        lower = Path(os.environ["CRS_BRIDGE_DEB_ROOT"]) if os.environ.get("CRS_BRIDGE_DEB_ROOT") else None
        if lower is None:
            lower = work / "debootstrap"
            subprocess.run(
                ["debootstrap", "--variant=minbase", "--include=python3,perl", SUITE, str(lower)],
                check=True,
                capture_output=True,
                timeout=900,
            )
        root = Root(lower, work / "root")
        build = subprocess.run(
            [str(REPO / "debian/build-deb"), str(root.share)],
            cwd=REPO, env=dict(os.environ, PYTHON=sys.executable), check=True, capture_output=True, text=True,
        )  # fmt: skip
        root.deb = Path(build.stdout.strip().splitlines()[-1])
        binding = {path: stand_in_binding(Path(path).stem) for path in BINDING_FILES}
        build_stand_in(root.share, "libpve-rs-perl", "0.13.0", binding)
        build_stand_in(root.share, "pve-ha-manager", "5.2.0", {"/usr/share/doc/pve-ha-manager/stand-in": "test\n"})
        root.run(
            "dpkg -i /mnt/libpve-rs-perl_0.13.0_all.deb /mnt/pve-ha-manager_5.2.0_all.deb >/dev/null"
            f" && mkdir -p /run/systemd/system && printf '%s' '{FAKE_SYSTEMCTL}' > /usr/sbin/systemctl"
            f" && printf '%s' '{FAKE_INVOKE}' > /usr/sbin/deb-systemd-invoke"
            " && chmod 755 /usr/sbin/systemctl /usr/sbin/deb-systemd-invoke && touch /run/pve-ha-crm.active"
        )
        root.binding = {path: root.sha256(path) for path in BINDING_FILES}
        yield root
    finally:
        shutil.rmtree(work, ignore_errors=True)


def test_package_is_lintian_clean(debian_root):
    if shutil.which("lintian") is None:
        missing = "lintian is not installed (apt install lintian): the package's lintian check did not run"
        if os.environ.get("CRS_BRIDGE_DEB_TEST") == "require":
            pytest.fail(missing)
        pytest.skip(missing)
    done = subprocess.run(["lintian", str(debian_root.deb)], capture_output=True, text=True, check=False)
    assert done.returncode == 0 and not done.stdout.strip(), done.stdout + done.stderr


def test_install_diverts_the_binding_and_restarts_a_running_crm(debian_root):
    root = debian_root
    root.run(f"apt-get install -y /mnt/{root.deb.name} >/dev/null")
    diversions = root.run("dpkg-divert --list crs-bridge").stdout
    for path in BINDING_FILES:
        assert f"diversion of {path} to {path}.distrib by crs-bridge" in diversions
        assert root.sha256(path + ".distrib") == root.binding[path], "the binding's file moved unchanged"
        assert b"CRSBridge::Scheduler" in root.read(path), "the drop-in is in its place"
    assert root.run("cat /run/restarts").stdout.split("\n")[:-1] == ["try-restart pve-ha-crm.service"]
    assert root.run("dpkg-query -W -f '${Conffiles}' crs-bridge").stdout.split()[0] == "/etc/crs-bridge/crs-bridge.conf"


def round_report(root: Root, extra: str = "") -> dict:
    done = root.run(ROUND + extra, check=False)
    report = json.loads(done.stdout)
    assert "error" not in report and done.returncode == 0, report
    return report


def test_round_in_the_daemons_conditions_gives_upstreams_answers(debian_root):
    report = round_report(debian_root)
    for mode, module in report["modules"].items():
        assert module == {"module": f"{BINDING_DIR}/{mode.capitalize()}.pm", "drop_in": True}
    assert report["static"]["start_order"] == ["C", "D", "B", "A"]  # the binding test's test_overcommitted
    # The crate's homogeneous cluster, raw formula (crate 2.0.0, libpve-rs-perl 0.13.0).
    assert report["dynamic"]["imbalance"] == pytest.approx(0.4893954724628247, abs=1e-12)
    moves = [(move["target"], move["imbalance"]) for move in report["dynamic"]["moves"]]
    assert moves == [
        ("node3", pytest.approx(0.597287465866405, abs=1e-15)),
        ("node2", pytest.approx(0.723982869039761, abs=1e-15)),
    ]
    assert Path(report["server"]["command"][0]).name == "crs-bridge"


def test_doctor_in_the_daemons_conditions_is_well(debian_root):
    done = debian_root.run(f"env -i PATH={DAEMON_PATH} crs-bridge doctor --json </dev/null", check=False)
    report = json.loads(done.stdout)
    assert done.returncode == 0 and report["ok"], done.stdout
    checks = {check["name"]: check for check in report["checks"]}
    assert {check["status"] for check in checks.values()} == {"ok"}, done.stdout
    assert checks["modules"]["details"]["static"]["package"] == "package crs-bridge (diverts libpve-rs-perl's)"
    assert checks["formula"]["details"] == {"in_force": "raw", "libpve-rs-perl": "0.13.0", "pve-ha-manager": "5.2.0"}
    assert checks["config"]["details"] == {"file": "/etc/crs-bridge/crs-bridge.conf", "settings": {}}


def test_round_after_calls_cut_short_by_alarms_gives_the_same_answers(debian_root):
    after_alarms, plain = round_report(debian_root, " --alarm 6"), round_report(debian_root)
    after_alarms.pop("server"), plain.pop("server")  # another server, another pid
    assert after_alarms == plain


def test_removal_puts_the_binding_back_byte_for_byte(debian_root):
    root = debian_root
    root.run("rm /run/restarts && apt-get remove -y crs-bridge >/dev/null")
    for path in BINDING_FILES:
        assert root.sha256(path) == root.binding[path]
    assert root.run("dpkg-divert --list crs-bridge").stdout == ""
    assert root.run("ls /usr/share/perl5/PVE/RS/ResourceScheduling").stdout.split() == ["Dynamic.pm", "Static.pm"]
    assert root.run("test ! -e /usr/lib/crs-bridge && test ! -e /usr/bin/crs-bridge", check=False).returncode == 0
    loaded = root.run(
        f"env -i PATH={DAEMON_PATH} perl -T -MPVE::RS::ResourceScheduling::Static"
        " -e 'print $PVE::RS::ResourceScheduling::Static::STAND_IN'"
    )
    assert loaded.stdout == "libpve-rs-perl stand-in Static", "perl loads the binding again"
    assert root.run("cat /run/restarts").stdout == "try-restart pve-ha-crm.service\n"
    root.run("apt-get purge -y crs-bridge >/dev/null")
    assert root.run("test -e /etc/crs-bridge", check=False).returncode != 0


def test_no_restart_when_the_crm_does_not_run(debian_root):
    root = debian_root
    root.run(f"rm -f /run/pve-ha-crm.active /run/restarts && apt-get install -y /mnt/{root.deb.name} >/dev/null")
    root.run("apt-get purge -y crs-bridge >/dev/null")
    assert root.run("test -e /run/restarts", check=False).returncode != 0
    for path in BINDING_FILES:
        assert root.sha256(path) == root.binding[path]
