"""The HA balancing settings ``crs-bridge review`` judges recorded rounds with, and where each came from.

HA's ``load_balance`` (``ha-manager.md`` §7.4) reads four settings from datacenter.cfg's ``crs``
property (§7.5): ``ha-auto-rebalance-threshold`` and ``-margin`` (fractions up to pve-cluster
9.1.4, percent from 9.1.5, when the file's format changed), ``-hold-duration`` (rounds) and
``-method``. The imbalance formula is the drop-in's (each recording names its own). A setting
comes from the command line, else from the datacenter.cfg read, else from HA 5.2.0's defaults;
:class:`Settings` keeps the source of each beside its value. Thresholds and margins are fractions
here, whatever unit the file holds them in.
"""

from __future__ import annotations

import math
import re
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from .core.verdicts import HA_MARGIN, HA_THRESHOLD

#: The settings, in the order the output names them.
NAMES = ("threshold", "margin", "hold", "method", "imbalance")
METHODS = ("bruteforce", "topsis")
FORMULAS = ("raw", "normalized")
#: HA 5.2.0's hold duration (rounds above the threshold before it balances).
HA_HOLD = 3
#: Where the installed Proxmox VE keeps the cluster-wide settings.
DATACENTER_CFG = "/etc/pve/datacenter.cfg"
#: datacenter.cfg's keys of the ``crs`` property, by setting.
CFG_KEYS = {
    "threshold": "ha-auto-rebalance-threshold",
    "margin": "ha-auto-rebalance-margin",
    "hold": "ha-auto-rebalance-hold-duration",
    "method": "ha-auto-rebalance-method",
}
#: The first pve-cluster whose datacenter.cfg holds threshold and margin in percent (§7.5).
PERCENT_SINCE = (9, 1, 5)
_HA_DEFAULT = "HA 5.2.0's default"
_RECORDED = "each recording's own"


class SettingsError(ValueError):
    """A setting that cannot be used (the message names it and the value)."""


@dataclass(frozen=True)
class Settings:
    """Threshold and margin (fractions), hold (rounds above the threshold before HA scores),
    method (bruteforce|topsis), imbalance (raw|normalized, or None: each recording's own formula),
    and ``sources``: setting name -> where its value came from, in words."""

    threshold: float = HA_THRESHOLD
    margin: float = HA_MARGIN
    hold: float = HA_HOLD
    method: str = "bruteforce"
    imbalance: str | None = None
    sources: Mapping[str, str] = field(
        default_factory=lambda: dict.fromkeys(NAMES, _HA_DEFAULT) | {"imbalance": _RECORDED}
    )

    def changed(self, values: Mapping[str, object], source: str, typed: bool = True) -> Settings:
        """These settings with ``values`` (checked, see :func:`checked`; ``typed``: by a person,
        whose margin above 1 is a percentage meant as a fraction) replacing theirs, from ``source``."""
        checked_values = {name: checked(name, value, typed) for name, value in values.items()}
        return replace(self, **checked_values, sources={**self.sources, **dict.fromkeys(values, source)})

    def value(self, name: str) -> object:
        return getattr(self, name)

    def shown(self, name: str) -> str:
        """The value as the output writes it (the formula None: 'recorded')."""
        value = self.value(name)
        if value is None:
            return "recorded"
        return f"{value:g}" if isinstance(value, float | int) else str(value)

    def to_wire(self) -> dict:
        return {name: {"value": self.value(name), "source": self.sources[name]} for name in NAMES}


def checked(name: str, value: object, typed: bool = True) -> object:
    """``value`` as setting ``name`` takes it: threshold and margin finite numbers >= 0 (a margin
    ``typed`` at most 1: a relative gain; a file's is taken as HA takes it), hold a number >= 0,
    method and imbalance one of their words."""
    if name in ("method", "imbalance"):
        allowed = METHODS if name == "method" else FORMULAS
        if value not in allowed:
            raise SettingsError(f"{name} must be one of {', '.join(allowed)}, got {value!r}")
        return value
    if name not in ("threshold", "margin", "hold"):
        raise SettingsError(f"no setting {name!r} (settings: {', '.join(NAMES)})")
    number = _number(name, value)
    if typed and name == "margin" and number > 1:
        raise SettingsError(
            f"margin {number:g} is above 1: a margin is a fraction here (did you mean {number / 100:g}?)"
        )
    return number


def _number(name: str, value: object) -> float:
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        number = math.nan
    if isinstance(value, bool) or not math.isfinite(number) or number < 0:
        raise SettingsError(f"{name} must be a finite number >= 0, got {value!r}")
    return number


def parse_pairs(text: str) -> dict[str, str]:
    """``k=v,k=v`` (``--what-if``) as a dict; SettingsError for a part without '=' or a key twice."""
    pairs: dict[str, str] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        key, equals, value = part.partition("=")
        key = key.strip()
        if not equals or not key:
            raise SettingsError(f"expected key=value, got {part!r} (keys: {', '.join(NAMES)})")
        if key in pairs:
            raise SettingsError(f"{key} is given twice")
        if key not in NAMES:
            raise SettingsError(f"no setting {key!r} (settings: {', '.join(NAMES)})")
        pairs[key] = value.strip()
    if not pairs:
        raise SettingsError(f"expected key=value,... (keys: {', '.join(NAMES)})")
    return pairs


# -- datacenter.cfg -------------------------------------------------------------------------


def crs_property(text: str) -> dict[str, str]:
    """The ``crs`` property of a datacenter.cfg text as key -> value (a part without '=' is the
    default key ``ha``, as ``crs: static`` writes it); {} when the file has none."""
    for line in text.splitlines():
        key, colon, value = line.partition(":")
        if colon and key.strip() == "crs" and not line.lstrip().startswith("#"):
            parts = (part.strip() for part in value.split(","))
            return dict(part.partition("=")[::2] if "=" in part else ("ha", part) for part in parts if part)
    return {}


def version_tuple(version: str) -> tuple[int, ...]:
    """The numbers of a Debian version's upstream part ('9.1.5-1' -> (9, 1, 5))."""
    upstream = version.split(":", 1)[-1].split("-", 1)[0]
    return tuple(int(number) for number in re.findall(r"\d+", upstream))


def installed_pve_cluster() -> str | None:
    """The installed pve-cluster's version (dpkg), or None where it is not installed."""
    try:
        done = subprocess.run(
            ["dpkg-query", "-W", "-f", "${Status} ${Version}", "pve-cluster"],
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    words = done.stdout.split()
    return words[-1] if done.returncode == 0 and "installed" in words[:3] and len(words) == 4 else None


def cfg_unit(version: str | None, values: Mapping[str, float]) -> tuple[str, str]:
    """(percent|fraction, why) for datacenter.cfg's threshold and margin: by the pve-cluster
    ``version`` that wrote the file; without one, percent when a value is above 1 (no margin
    and no usual threshold is, as a fraction)."""
    if version is not None:
        unit = "percent" if version_tuple(version) >= PERCENT_SINCE else "fraction"
        return unit, f"pve-cluster {version}"
    if any(value > 1 for value in values.values()):
        return "percent", "guessed: no pve-cluster installed, a value above 1"
    return "fraction", "guessed: no pve-cluster installed, no value above 1"


def from_datacenter_cfg(settings: Settings, path: str, text: str, version: str | None) -> tuple[Settings, list[str]]:
    """``settings`` with those the ``crs`` property of ``text`` (read from ``path``) sets, in the
    unit ``version`` of pve-cluster reads them; and notes on what HA does with them (the
    balancer off, a scheduler mode that does not balance)."""
    crs = crs_property(text)
    notes = []
    if crs.get("ha-auto-rebalance", "0") not in ("1", "true", "yes", "on"):
        notes.append(f"{path}: ha-auto-rebalance is off: HA balanced none of these rounds (reviewed as if it were on)")
    if crs.get("ha", "basic") not in ("static", "dynamic"):
        notes.append(f"{path}: crs ha={crs.get('ha', 'basic')}: HA balances only with the static or dynamic scheduler")
    fractions = {}
    for name in ("threshold", "margin"):
        if CFG_KEYS[name] in crs:
            fractions[name] = _number(CFG_KEYS[name], crs[CFG_KEYS[name]])
    unit, why = cfg_unit(version, fractions)
    for name in CFG_KEYS:
        if CFG_KEYS[name] not in crs:
            continue
        raw = crs[CFG_KEYS[name]]
        value: object = raw
        source = f"{path}: {CFG_KEYS[name]}={raw}"
        if name in fractions:
            value = fractions[name] / 100 if unit == "percent" else fractions[name]
            source += f" ({unit}, {why})"
        try:
            settings = settings.changed({name: value}, source, typed=False)
        except SettingsError as problem:
            raise SettingsError(f"{path}: {problem}") from None
    return settings, notes
