"""Feature gates per component: `component:Gate=bool` as users write them, and each binary's --feature-gates.

A build plus its gates is what a report calls the target: `kube-scheduler v1.36.3 SchedulerAsyncAPICalls=true`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

COMPONENTS = ("kube-apiserver", "kube-controller-manager", "kube-scheduler")
_GATE = re.compile(r"[A-Z][A-Za-z0-9]*")
_BOOLS = {"true": True, "false": False}

Gates = dict[str, dict[str, bool]]  # component -> gate -> on


def parse(text: str) -> tuple[str, str, bool]:
    """`kube-scheduler:SchedulerAsyncAPICalls=true` -> (component, gate, on); ValueError names what is wrong."""
    component, colon, setting = text.partition(":")
    gate, equals, value = setting.partition("=")
    if not colon or not equals:
        raise ValueError(f"{text!r} is not component:Gate=true|false "
                         "(e.g. kube-scheduler:SchedulerAsyncAPICalls=true)")
    if component not in COMPONENTS:
        raise ValueError(f"{text!r}: unknown component {component!r} (one of {', '.join(COMPONENTS)})")
    if not _GATE.fullmatch(gate):
        raise ValueError(f"{text!r}: {gate!r} is not a feature gate name (letters and digits, an upper-case first)")
    if value.lower() not in _BOOLS:
        raise ValueError(f"{text!r}: {value!r} is not true or false")
    return component, gate, _BOOLS[value.lower()]


def collect(settings: Iterable[str | tuple[str, str, bool]]) -> Gates:
    """Settings (text or parsed) as component -> gate -> on; the same gate set twice differently is an error."""
    out: Gates = {}
    for setting in settings:
        component, gate, on = parse(setting) if isinstance(setting, str) else setting
        had = out.setdefault(component, {}).get(gate)
        if had is not None and had != on:
            raise ValueError(f"{component}:{gate} is set both true and false")
        out[component][gate] = on
    return out


def flag(gates: Mapping[str, Mapping[str, bool]], component: str) -> list[str]:
    """The binary's `--feature-gates=A=true,B=false` (sorted), or nothing when none is set for it."""
    mine = gates.get(component) or {}
    if not mine:
        return []
    return ["--feature-gates=" + ",".join(f"{g}={'true' if on else 'false'}" for g, on in sorted(mine.items()))]


def describe(gates: Mapping[str, Mapping[str, bool]], component: str) -> str:
    """A component's gates as a report shows them beside its build: `A=true B=false` (empty when none)."""
    return " ".join(f"{g}={'true' if on else 'false'}" for g, on in sorted((gates.get(component) or {}).items()))


def target(build: str, gates: Mapping[str, Mapping[str, bool]], component: str) -> str:
    """A build plus its gates: `kube-scheduler v1.36.3 SchedulerAsyncAPICalls=true`."""
    shown = describe(gates, component)
    return f"{build} {shown}" if shown else build
