"""``crs-bridge doctor``: what the HA manager's CRM would get from the scheduler modules.

It runs an HA-style round (``ha_round.pl``, beside this module) the way ``pve-ha-crm`` runs
its rounds: ``perl -T`` (which ignores ``PERL5LIB``), a clean environment with the daemon's
``PATH``, stdin, stdout and stderr on ``/dev/null``. From that round it reports which
``PVE::RS::ResourceScheduling::Static``/``::Dynamic`` wins in ``@INC`` (crs-bridge's drop-in or
the Rust binding, and which package owns the file), whether the server started and gave
upstream's answers, the imbalance formula in force (read from the answers themselves) and
whether it is the one of the installed libpve-rs-perl and pve-ha-manager, the server's limits
(``bridge.info`` from the same command, in the same conditions), the config file and where the
server's log goes. Exit status 0 when every check passes (warnings allowed), 1 otherwise.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from .bridge import UPSTREAM

# subprocess is imported where it is used: the CLI imports this module for its parser, and
# `crs-bridge serve`, which never needs subprocess, starts faster without it.

#: PVE::Daemon's PATH: what the drop-in finds the server on.
DAEMON_PATH = "/sbin:/bin:/usr/sbin:/usr/bin"
#: The config file the drop-in reads (CRS_BRIDGE_CONFIG names another one, for tests).
CONFIG_FILE = "/etc/crs-bridge/crs-bridge.conf"
ROUND_SCRIPT = Path(__file__).with_name("ha_round.pl")
#: Seconds the round (two server starts at most, a few calls) may take.
ROUND_TIMEOUT = 60

#: Upstream's answers to the round of ha_round.pl: the perl-rs binding test's
#: `test_overcommitted` start order, and the scheduling crate's homogeneous cluster: its node
#: imbalance and the imbalances after vm:101's two moves, per formula (truncated to 15
#: decimals, as the binding returns them).
STATIC_START_ORDER = ["C", "D", "B", "A"]
DYNAMIC_ANSWERS = {
    "raw": {"imbalance": 0.4893954724628247, "moves": [("node3", 0.597287465866405), ("node2", 0.723982869039761)]},
    "normalized": {
        "imbalance": 0.3460548572604576,
        "moves": [("node3", 0.422346017431863), ("node2", 0.511933196160907)],
    },
}
#: Tolerance on the imbalance: upstream's tests take f64::EPSILON; the round's value is truncated.
TOLERANCE = 1e-12

OK, WARN, FAIL = "ok", "warn", "fail"


@dataclasses.dataclass
class Check:
    """One line of the report: ``status`` is ok, warn (does not fail the doctor) or fail."""

    name: str
    status: str
    message: str
    details: dict[str, Any] = dataclasses.field(default_factory=dict)


def add_parser(commands: Any) -> None:
    """Register ``doctor`` on the CLI's subcommands (``run`` is the handler)."""
    doctor = commands.add_parser("doctor", help="check what pve-ha-crm would get from the scheduler modules")
    doctor.add_argument("--json", action="store_true", help="print the report as JSON")
    doctor.add_argument(
        "--perl-inc",
        metavar="DIR",
        action="append",
        default=[],
        help="put DIR first in perl's @INC (to check a source tree; the daemon has no such option)",
    )
    doctor.add_argument("--config", metavar="FILE", help=f"check with this config file instead of {CONFIG_FILE}")
    doctor.add_argument(
        "--path", default=DAEMON_PATH, help=f"the PATH the round gets (default the daemon's: {DAEMON_PATH})"
    )
    doctor.set_defaults(run=run, log_level="warning")  # main() configures logging for every command


def run(args: argparse.Namespace) -> int:
    """Run every check and print the report; 0 when none failed, 1 otherwise."""
    checks = diagnose(args.perl_inc, args.config, args.path)
    healthy = all(check.status != FAIL for check in checks)
    if args.json:
        report = {"ok": healthy, "conditions": conditions(args.path), "checks": [dataclasses.asdict(c) for c in checks]}
        print(json.dumps(report, indent=2))
    else:
        sys.stdout.write(report_text(checks, healthy, args.path))
    return 0 if healthy else 1


def conditions(path: str) -> dict[str, Any]:
    """The daemon's conditions the round ran in, for the JSON report."""
    return {"perl": "perl -T", "environment": {"PATH": path}, "stdio": "/dev/null"}


def diagnose(perl_inc: Sequence[str], config: str | None, path: str) -> list[Check]:
    """The checks, in the report's order."""
    env = {"PATH": path} | ({"CRS_BRIDGE_CONFIG": config} if config else {})
    round_report = run_round(perl_inc, env)
    checks = [modules_check(round_report), server_check(round_report)]
    answers, formula = answers_check(round_report)
    checks += [answers, formula_check(formula, installed_version), limits_check(round_report, env)]
    checks += [config_check(round_report), recorder_check(round_report), logs_check(round_report)]
    checks.append(environment_check(os.environ))
    return checks


# -- the round ---------------------------------------------------------------------------------


def run_round(perl_inc: Sequence[str], env: dict[str, str]) -> dict[str, Any]:
    """Run ha_round.pl as the daemon would (see the module's docstring); its report, or
    ``{"error": ...}`` when it gave none."""
    import subprocess

    read_end, write_end = os.pipe()
    command = ["/usr/bin/perl", "-T"] + [f"-I{os.path.abspath(d)}" for d in perl_inc] + [str(ROUND_SCRIPT)]
    # The report comes on a pipe of its own: stdout stays /dev/null, as under the daemon.
    command += ["--report-fd", str(write_end)]
    try:
        child = subprocess.Popen(
            command,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            pass_fds=(write_end,),
            cwd="/",
        )
    except OSError as exc:
        os.close(read_end)
        return {"error": f"cannot run perl: {exc}"}
    finally:
        os.close(write_end)
    with os.fdopen(read_end, "rb") as reader:
        text = reader.read()
    try:
        child.wait(ROUND_TIMEOUT)
    except subprocess.TimeoutExpired:
        child.kill()
        child.wait()
        return {"error": f"the round took over {ROUND_TIMEOUT} s"}
    try:
        return json.loads(text)
    except ValueError:
        return {"error": f"perl ended (status {child.returncode}) without a report"}


def modules_check(report: dict[str, Any]) -> Check:
    """Which Static.pm/Dynamic.pm perl loads, and whether they are crs-bridge's drop-ins."""
    found = report.get("modules")
    if not found:
        hint = f"; {install_hint()}" if _NOT_FOUND.search(str(report.get("error"))) else ""
        return Check("modules", FAIL, f"the scheduler modules did not load: {error_of(report)}{hint}")
    lines, drop_ins = [], 0
    for mode in ("static", "dynamic"):
        module = found[mode]
        owner = package_of(module["module"])
        kind = "crs-bridge drop-in" if module["drop_in"] else "not crs-bridge (the Rust binding?)"
        drop_ins += bool(module["drop_in"])
        lines.append(f"{mode}: {module['module']} ({kind}; {owner})")
        module["package"] = owner
    if drop_ins < 2:
        return Check("modules", FAIL, "the daemon would not use crs-bridge: " + "; ".join(lines), found)
    return Check("modules", OK, "; ".join(lines), found)


def package_of(path: str) -> str:
    """Whose file is at ``path``, as dpkg says: "package crs-bridge (diverts libpve-rs-perl's)",
    "package libpve-rs-perl", "no package" or "no dpkg here"."""
    owners = dpkg_query(["-S", path])
    if owners is None:
        return "no dpkg here"
    # "diversion by P from: PATH" lines, then "P1, P2: PATH": every package listing PATH.
    diverter = re.search(r"^diversion by (\S+) from: ", owners, re.MULTILINE)
    lines = [line for line in owners.splitlines() if not line.startswith("diversion ")]
    names = [name for line in lines for name in line.rsplit(": ", 1)[0].split(", ")]
    if not diverter:
        return f"package {', '.join(names)}" if names else "no package"
    others = [name for name in names if name != diverter[1]]
    return f"package {diverter[1]}" + (f" (diverts {', '.join(others)}'s)" if others else "")


def install_hint() -> str:
    """What to do when perl finds no scheduler module: install the package, or, run from a
    checkout, the options that point the round at the checkout's drop-in and server."""
    hint = "install the crs-bridge package (README: Deploy on Proxmox VE)"
    checkout_lib = ROUND_SCRIPT.parents[1] / "perl-client" / "lib"
    server_dir = Path(sys.executable).parent
    if checkout_lib.is_dir() and (server_dir / "crs-bridge").exists():
        hint += f", or to check this checkout: --perl-inc {checkout_lib} --path {server_dir}:{DAEMON_PATH}"
    return hint


def server_check(report: dict[str, Any]) -> Check:
    server = report.get("server") or {}
    if not report.get("modules") and _NOT_FOUND.search(str(report.get("error"))):
        return Check("server", FAIL, "not started: the scheduler modules did not load", {"error": report["error"]})
    if "error" in report:
        return Check("server", FAIL, f"the round failed: {error_of(report)}", server | {"error": report["error"]})
    if not server:
        return Check("server", WARN, "no crs-bridge server: the modules in use are not crs-bridge's")
    command = " ".join(server.get("command") or ["?"])
    return Check("server", OK, f"'{command}' started and answered an HA-style round", server)


def answers_check(report: dict[str, Any]) -> tuple[Check, str | None]:
    """Whether the round gave upstream's answers, and with which formula (None: neither)."""
    if "error" in report or "dynamic" not in report:
        return Check("answers", FAIL, "no answers: the round failed"), None
    order = report["static"]["start_order"]
    dynamic = report["dynamic"]
    formula = next((name for name, answer in DYNAMIC_ANSWERS.items() if same_answers(dynamic, answer)), None)
    got = {"start_order": order, "imbalance": dynamic["imbalance"], "moves": dynamic["moves"]}
    if order != STATIC_START_ORDER or formula is None:
        return Check("answers", FAIL, f"the answers are not upstream's: {json.dumps(got)}", got), None
    message = (
        f"upstream's answers (start order {', '.join(order)}; imbalance {dynamic['imbalance']}, "
        f"the {formula} formula's; best move to {dynamic['moves'][0]['target']})"
    )
    return Check("answers", OK, message, got | {"formula": formula}), formula


def same_answers(dynamic: dict[str, Any], answer: dict[str, Any]) -> bool:
    moves = [(move["target"], move["imbalance"]) for move in dynamic["moves"]]
    return (
        abs(dynamic["imbalance"] - answer["imbalance"]) <= TOLERANCE
        and [target for target, _ in moves] == [target for target, _ in answer["moves"]]
        and all(abs(got - want) <= TOLERANCE for (_, got), (_, want) in zip(moves, answer["moves"]))
    )


# -- the formula against the installed releases ------------------------------------------------


def formula_check(formula: str | None, version_of: Callable[[str], str | None]) -> Check:
    """Whether the formula in force is the one of the installed libpve-rs-perl/pve-ha-manager."""
    if formula is None:
        return Check("formula", FAIL, "unknown: the round gave no answer to tell it by")
    verdicts, details, unsure = [], {"in_force": formula}, False
    for package, ((major, minor), expected) in FORMULA_OF_RELEASE.items():
        version = version_of(package)
        details[package] = version
        release = release_of(version)
        if version is None:
            verdicts.append(f"{package} is not installed")
            unsure = True
        elif release is None or release > (major, minor):
            verdicts.append(f"{package} {version} is newer than {major}.{minor}, which crs-bridge knows: check it")
            unsure = True
        elif release < (major, minor):
            verdicts.append(f"{package} {version} does not rebalance (the formula is unused)")
        elif expected != formula:
            message = f"{formula} is in force but {package} {version} uses {expected}: set 'imbalance: {expected}'"
            return Check("formula", FAIL, message + f" in {CONFIG_FILE}", details)
        else:
            verdicts.append(f"{package} {version} uses {expected} too")
    return Check("formula", WARN if unsure else OK, f"{formula} in force; " + "; ".join(verdicts), details)


def release_of(version: str | None) -> tuple[int, int] | None:
    """(major, minor) of a Debian version such as '0.13.0' or '1:5.2.0-1'."""
    match = re.match(r"(?:\d+:)?(\d+)\.(\d+)", version or "")
    return (int(match[1]), int(match[2])) if match else None


#: The formula each upstream release line computes or was tuned for: libpve-rs-perl 0.13 is
#: built with proxmox-resource-scheduling 2.0.0 (raw), pve-ha-manager 5.2's default threshold
#: 0.3 was tuned for it. Older lines do not rebalance (the formula is unused); newer ones are
#: unknown to this release.
FORMULA_OF_RELEASE = {
    package: (release_of(UPSTREAM[package]), "raw") for package in ("libpve-rs-perl", "pve-ha-manager")
}


def installed_version(package: str) -> str | None:
    """The installed version of a Debian package, or None."""
    status = dpkg_query(["-W", "-f", "${db:Status-Abbrev}${Version}", package])
    return status[3:].strip() if status and status.startswith("ii") else None


def dpkg_query(args: list[str]) -> str | None:
    """dpkg-query's output, "" when it found nothing, None without dpkg."""
    import subprocess

    try:
        done = subprocess.run(["dpkg-query", *args], capture_output=True, text=True, check=False)
    except OSError:
        return None
    return done.stdout if done.returncode == 0 else ""


# -- limits, config, logs, environment ---------------------------------------------------------


def limits_check(report: dict[str, Any], env: dict[str, str]) -> Check:
    """The limits in force: ``bridge.info`` from the server command, started as the drop-in does."""
    import subprocess

    command = (report.get("server") or {}).get("command")
    if not command:
        return Check("limits", WARN, "no crs-bridge server to ask")
    request = b'{"jsonrpc": "2.0", "id": 1, "method": "bridge.info"}\n'
    try:
        done = subprocess.run(command, input=request, capture_output=True, env=env, timeout=30, check=False)
        info = json.loads(done.stdout.splitlines()[0])["result"]
    except (OSError, subprocess.TimeoutExpired, ValueError, IndexError, KeyError) as exc:
        return Check("limits", FAIL, f"'{' '.join(command)}' gave no bridge.info: {exc!r}")
    limits = ", ".join(f"{name.replace('_', '-')} {value}" for name, value in info["limits"].items())
    return Check(
        "limits", OK, f"crs-bridge {info['version']}: {limits}", {"version": info["version"], **info["limits"]}
    )


def config_check(report: dict[str, Any]) -> Check:
    """The drop-in's settings as its own ``CRSBridge::Config`` read them in the round: the file,
    and each setting not at its default with where it comes from."""
    if report.get("config_error"):
        return Check("config", FAIL, f"the drop-in cannot read its settings: {report['config_error'].strip()}")
    config = report.get("config")
    if config is None:
        return Check("config", WARN, "no crs-bridge drop-in loaded: its settings do not apply")
    path, set_here = config["file"], config["settings"]
    settings = {key: setting["value"] for key, setting in set_here.items()}
    details = {"file": path, "settings": settings}
    if not set_here and not os.path.exists(path):
        return Check("config", WARN, f"{path} does not exist: every setting is its default", details)
    shown = ", ".join(f"{key}: {s['value']} ({s['source']})" for key, s in set_here.items())
    return Check("config", OK, f"{path}: {shown or 'every setting is its default'}", details)


def recorder_check(report: dict[str, Any]) -> Check:
    """Whether the flight recorder can write where ``record`` says: the directory, or the
    nearest folder above it that exists (the recorder makes the rest on first use)."""
    record = ((report.get("config") or {}).get("settings") or {}).get("record", {}).get("value", "off")
    if record == "off":
        return Check("recorder", OK, "off (the 'record' setting names no directory)", {"record": None})
    existing = Path(record)
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    details = {"record": record, "existing": str(existing)}
    if not existing.is_dir():
        return Check("recorder", FAIL, f"record: {record}: {existing} is not a directory", details)
    if not os.access(existing, os.W_OK | os.X_OK):
        return Check("recorder", FAIL, f"record: {record}: {existing} is not writable", details)
    made = "" if existing == Path(record) else " (made on first use)"
    return Check("recorder", OK, f"records each scheduler object to {record}{made}", details)


def logs_check(report: dict[str, Any]) -> Check:
    """Where the server's log goes: the drop-in's ``log`` setting and the stderr the server got
    (``stderr`` on /dev/null, as under the daemon, means syslog)."""
    target = (report.get("config") or {}).get("log")
    stderr = (report.get("server") or {}).get("stderr")
    if target is None:
        return Check("logs", WARN, "unknown: the drop-in's settings are unknown", {"server_stderr": stderr})
    destination = target
    if target == "stderr" and stderr in (None, "/dev/null"):
        destination = "syslog"  # what the server does with no stderr to write to
    details = {"log": target, "destination": destination, "server_stderr": stderr}
    where = {"syslog": "syslog / the journal", "stderr": f"the caller's stderr ({stderr})"}.get(
        destination, f"the file {destination}"
    )
    message = f"log: {target}, so the server logs to {where}"
    if destination not in ("syslog", "stderr") and not os.access(os.path.dirname(destination) or ".", os.W_OK):
        return Check("logs", FAIL, f"{message}: its folder is not writable", details)
    return Check("logs", OK, message, details)


def environment_check(environ: dict[str, str]) -> Check:
    """CRS_BRIDGE_* variables set here do not reach the daemon: say so."""
    names = sorted(name for name in environ if name.startswith("CRS_BRIDGE_"))
    if not names:
        return Check("environment", OK, "no CRS_BRIDGE_* variable here (the daemon has none either)")
    message = f"{', '.join(names)} set here, but pve-ha-crm does not see them: use {CONFIG_FILE}"
    return Check("environment", WARN, message, {"variables": names})


#: perl's error for a module missing from @INC (followed by the whole @INC, which says nothing
#: to a reader): the file it sought.
_NOT_FOUND = re.compile(r"Can't locate (\S+\.pm) in @INC")


def error_of(report: dict[str, Any]) -> str:
    """The round's error for a reader: a module missing from @INC as just that."""
    error = str(report.get("error", "no report")).strip()
    missing = _NOT_FOUND.search(error)
    return f"perl finds no {missing[1]} in @INC" if missing else error


def report_text(checks: Sequence[Check], healthy: bool, path: str) -> str:
    """The report for a reader: one line per check, then the verdict."""
    lines = [
        f"crs-bridge doctor: what pve-ha-crm would get (perl -T, clean environment, PATH={path}, stdio on /dev/null)",
        "",
    ]
    lines += [f"  {check.status:<5} {check.name:<12} {check.message}" for check in checks]
    verdict = "all is well" if healthy else "NOT WELL: see the lines marked fail"
    lines += ["", f"{verdict} (exit {0 if healthy else 1})"]
    return "\n".join(lines) + "\n"
