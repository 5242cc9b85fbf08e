"""`crs-bridge doctor` from the source tree: the real round (perl -T, the drop-in of
perl-client/lib, a real server) in the daemon's conditions, and its verdicts. The installed
package's doctor is tested in tests/test_deb_package.py."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from crs_bridge import doctor
from crs_bridge.bridge import __version__

REPO = Path(__file__).resolve().parent.parent
PERL_LIB = REPO / "perl-client/lib"
SHIPPED_CONFIG = REPO / "debian/crs-bridge.conf"


def run_doctor(*args: str, inc: Path = PERL_LIB, env: dict[str, str] | None = None) -> tuple[int, dict]:
    """Exit status and JSON report of the doctor, with ``inc`` first in perl's @INC."""
    command = [sys.executable, "-m", "crs_bridge", "doctor", "--json", "--perl-inc", str(inc)]
    command += ["--perl-inc", str(PERL_LIB), *args]
    done = subprocess.run(command, capture_output=True, text=True, env=env, check=False, timeout=120)
    report = json.loads(done.stdout)
    report["by_name"] = {check["name"]: check for check in report["checks"]}
    return done.returncode, report


def server_path() -> str:
    """A PATH with this tree's crs-bridge on it (and nothing else)."""
    return str(Path(sys.executable).parent)


def test_the_round_through_the_drop_in_gives_upstreams_answers_and_the_daemon_ignores_the_callers_variables():
    env = dict(os.environ, CRS_BRIDGE_IMBALANCE="normalized")
    status, report = run_doctor("--path", server_path(), "--config", str(SHIPPED_CONFIG), env=env)
    checks = report["by_name"]
    assert status == 0 and report["ok"]
    assert checks["modules"]["status"] == "ok"
    assert checks["modules"]["details"]["static"]["module"] == str(PERL_LIB / "PVE/RS/ResourceScheduling/Static.pm")
    assert checks["server"]["details"]["command"] == [str(Path(server_path()) / "crs-bridge"), "serve"]
    # The caller's CRS_BRIDGE_IMBALANCE does not reach the round, as it would not reach the daemon.
    assert checks["answers"]["details"]["formula"] == "raw"
    assert checks["environment"]["status"] == "warn" and "CRS_BRIDGE_IMBALANCE" in checks["environment"]["message"]
    assert checks["limits"]["details"]["version"] == __version__
    # Nothing set: the server's stderr is /dev/null under the daemon, so it logs to syslog.
    assert checks["logs"]["details"] == {"log": "stderr", "destination": "syslog", "server_stderr": "/dev/null"}


def test_no_server_on_the_daemons_path_fails_and_says_so(tmp_path):
    status, report = run_doctor("--path", str(tmp_path))
    checks = report["by_name"]
    assert status == 1 and not report["ok"]
    assert checks["modules"]["status"] == "ok", "the drop-in loads; the server is what is missing"
    assert checks["server"]["status"] == "fail" and "'crs-bridge' is not on PATH" in checks["server"]["message"]
    assert checks["answers"]["status"] == "fail"


def test_a_binding_first_in_inc_is_not_crs_bridge(tmp_path):
    for mode in ("Static", "Dynamic"):
        module = tmp_path / f"PVE/RS/ResourceScheduling/{mode}.pm"
        module.parent.mkdir(parents=True, exist_ok=True)
        module.write_text(f'package PVE::RS::ResourceScheduling::{mode};\nsub new {{ die "binding\\n" }}\n1;\n')
    status, report = run_doctor("--path", server_path(), inc=tmp_path)
    modules = report["by_name"]["modules"]
    assert status == 1 and modules["status"] == "fail" and "would not use crs-bridge" in modules["message"]
    static = modules["details"]["static"]
    assert static["module"] == str(tmp_path / "PVE/RS/ResourceScheduling/Static.pm") and static["drop_in"] is False


def test_a_log_file_in_a_missing_folder_fails(tmp_path):
    config = tmp_path / "crs-bridge.conf"
    config.write_text("# a comment\n\nlog: /nonexistent-folder/crs-bridge.log  # trailing comment\n")
    status, report = run_doctor("--path", server_path(), "--config", str(config))
    assert status == 1
    assert report["by_name"]["config"]["details"]["settings"] == {"log": "/nonexistent-folder/crs-bridge.log"}
    assert report["by_name"]["logs"]["status"] == "fail"


def test_a_record_directory_that_cannot_be_made_fails(tmp_path):
    config = tmp_path / "crs-bridge.conf"
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    config.write_text(f"record: {blocker}/record\n")
    status, report = run_doctor("--path", server_path(), "--config", str(config))
    assert status == 1
    assert report["by_name"]["recorder"]["status"] == "fail"
    assert "is not a directory" in report["by_name"]["recorder"]["message"]
    config.write_text(f"record: {tmp_path}/new/record\n")
    status, report = run_doctor("--path", server_path(), "--config", str(config))
    assert report["by_name"]["recorder"]["status"] == "ok", report["by_name"]["recorder"]
    assert (tmp_path / "new/record").is_dir()  # the round's own recorder made it


def test_the_shipped_config_file_documents_every_key_and_sets_none():
    # The drop-in's own reader: every key at its default, and the file names each key.
    script = (
        "print join(' ', map { CRSBridge::Config::source($_) eq 'default' ? $_ : 'SET' } CRSBridge::Config::names())"
    )
    done = subprocess.run(
        ["perl", f"-I{PERL_LIB}", "-MCRSBridge::Config", "-e", script],
        env={"PATH": os.environ["PATH"], "CRS_BRIDGE_CONFIG": str(SHIPPED_CONFIG)},
        capture_output=True,
        text=True,
        check=True,
    )
    keys = done.stdout.split()
    assert "SET" not in keys
    documented = re.findall(r"^#([a-z-]+): ", SHIPPED_CONFIG.read_text(), re.MULTILINE)
    assert sorted(documented) == keys


@pytest.mark.parametrize(
    ("versions", "formula", "status", "says"),
    [
        ({"libpve-rs-perl": "0.13.0", "pve-ha-manager": "5.2.0"}, "raw", "ok", "libpve-rs-perl 0.13.0 uses raw too"),
        ({"libpve-rs-perl": "0.13.0", "pve-ha-manager": "5.2.0"}, "normalized", "fail", "set 'imbalance: raw'"),
        ({"libpve-rs-perl": "0.13.2", "pve-ha-manager": "1:5.2.1-1"}, "normalized", "fail", "uses raw"),
        ({"libpve-rs-perl": "0.14.0", "pve-ha-manager": "5.2.0"}, "raw", "warn", "newer than 0.13"),
        ({"libpve-rs-perl": "0.12.5", "pve-ha-manager": "5.1.0"}, "normalized", "ok", "does not rebalance"),
        ({"libpve-rs-perl": None, "pve-ha-manager": None}, "raw", "warn", "libpve-rs-perl is not installed"),
        ({"libpve-rs-perl": "0.13.0", "pve-ha-manager": "5.2.0"}, None, "fail", "unknown"),
    ],
)
def test_formula_against_the_installed_releases(versions, formula, status, says):
    check = doctor.formula_check(formula, versions.get)
    assert check.status == status and says in check.message


@pytest.mark.skipif(
    Path("/usr/share/perl5/PVE/RS/ResourceScheduling/Static.pm").exists(), reason="a scheduler module is installed"
)
def test_off_a_node_it_says_what_to_install_or_pass_not_perls_inc():
    """No scheduler module anywhere in @INC: the report names the package to install and, from a
    checkout, the options that check it; never perl's @INC dump."""
    done = subprocess.run(
        [sys.executable, "-m", "crs_bridge", "doctor"], capture_output=True, text=True, check=False, timeout=120
    )
    lines = {line.split()[1]: line for line in done.stdout.splitlines() if line.startswith("  ")}
    assert done.returncode == 1 and "@INC contains" not in done.stdout
    assert "install the crs-bridge package" in lines["modules"]
    advice = f"--perl-inc {PERL_LIB} --path {server_path()}:{doctor.DAEMON_PATH}"
    assert lines["modules"].endswith(advice) and "the scheduler modules did not load" in lines["server"]
    followed = subprocess.run(
        [sys.executable, "-m", "crs_bridge", "doctor", *advice.split()], capture_output=True, text=True, timeout=120
    )
    assert followed.returncode == 0, followed.stdout
