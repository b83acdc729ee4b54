"""A search's target (the scheduler's build plus its feature gates) and its control by gates.

`--control gates:SchedulerAsyncAPICalls=false` is a differential control: the same build as the target,
under the same profile and workload, with those gates set otherwise (the rest of the target's gates kept).
A hit with a gate on is confirmed only if the control with it off keeps the hit's invariants (and the
reverse). A control's gate without a component is the scheduler's (`gates:kube-scheduler:Gate=bool` names
it); by default a search with gates is controlled by the same build with each of its gates flipped.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from kube_fault_proxy.rig.cluster import feature_gates
from kube_fault_proxy.rig.cluster.feature_gates import Gates

GATES = "gates:"
SEARCHABLE = ("kube-apiserver", "kube-scheduler")  # the components a search trial runs (a scheduler's rig)


def is_gates(control: str | None) -> bool:
    """Whether a control is the target's build with other gates."""
    return control is not None and control.startswith(GATES)


def target_gates(settings: Iterable[tuple[str, str, bool]], scheduler: str) -> Gates:
    """`--feature-gates` of a search as component -> gate -> on; ValueError names what a search cannot run."""
    gates = feature_gates.collect(settings)
    for component in gates:
        if component not in SEARCHABLE:
            raise ValueError(f"--feature-gates {component}:...: a search runs only "
                             f"{' and '.join(SEARCHABLE)} (kube-controller-manager targets are not searched yet)")
    if "kube-scheduler" in gates and scheduler != "kube-scheduler":
        raise ValueError("--feature-gates kube-scheduler:... needs --scheduler kube-scheduler")
    return gates


def parse(control: str, scheduler: str) -> Gates:
    """`gates:A=false,kube-apiserver:B=true` -> the gates it changes; ValueError names the bad part."""
    body = control.removeprefix(GATES)
    parts = [p.strip() for p in body.split(",") if p.strip()]
    if not parts:
        raise ValueError(f"--control {control!r}: name at least one gate (gates:Gate=true|false,...)")
    try:
        gates = feature_gates.collect(p if ":" in p.partition("=")[0] else f"{scheduler}:{p}" for p in parts)
    except ValueError as e:
        raise ValueError(f"--control {control!r}: {e}") from None
    for component in gates:
        if component not in SEARCHABLE or (component == "kube-scheduler" and scheduler != "kube-scheduler"):
            raise ValueError(f"--control {control!r}: a search of {scheduler} cannot set {component}'s gates")
    return gates


def merged(target: Mapping[str, Mapping[str, bool]], changes: Mapping[str, Mapping[str, bool]]) -> Gates:
    """The control's gates: the target's, with the control's changes over them."""
    out = {c: dict(g) for c, g in target.items()}
    for component, gates in changes.items():
        out.setdefault(component, {}).update(gates)
    return out


def flipped(target: Mapping[str, Mapping[str, bool]], scheduler: str) -> str | None:
    """The default control of a search with gates: each of them the other way (None: no gates)."""
    parts = [f"{g}={'false' if on else 'true'}" if c == scheduler else f"{c}:{g}={'false' if on else 'true'}"
             for c, gs in sorted(target.items()) for g, on in sorted(gs.items())]
    return GATES + ",".join(parts) if parts else None


def same_as_target(target: Mapping[str, Mapping[str, bool]], changes: Mapping[str, Mapping[str, bool]]) -> bool:
    """Whether a control by gates changes nothing the target sets (then it is no control)."""
    return all(target.get(c, {}).get(g) == on for c, gs in changes.items() for g, on in gs.items())


def state_name(control: str) -> str:
    """A control rig's state directory name: `gates-SchedulerAsyncAPICalls-false`."""
    return "".join(ch if ch.isalnum() else "-" for ch in control).strip("-")
