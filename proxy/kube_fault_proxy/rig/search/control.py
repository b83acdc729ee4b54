"""A search's target (the scheduler's build plus its feature gates) and its control by gates or by build.

`--control gates:SchedulerAsyncAPICalls=false` is a differential control: the same build as the target,
under the same profile and workload, with those gates set otherwise (the rest of the target's gates kept).
A hit with a gate on is confirmed only if the control with it off keeps the hit's invariants (and the
reverse). A control's gate without a component is the scheduler's (`gates:kube-scheduler:Gate=bool` names
it); by default a search with gates is controlled by the same build with each of its gates flipped.

`--control build:released` is the control of a patched or source build (`--yunikorn-patch`, `--yunikorn-source`,
`--kube-scheduler-patch`): the same scheduler as released (kube-scheduler: of the search's release), with the
target's gates, under the same profile and workload. A bug the patch
planted counts only where the released build stays clean (the mutation benchmark, bench/mutation.py).
`--control build:patch=FILE` is the same with FILE applied to the release: the control of a build that has FILE
and more (a bug planted on a fixed base), so only what the target adds to FILE is confirmed.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path

from kube_fault_proxy import shipped
from kube_fault_proxy.rig.cluster import feature_gates, patches, sources
from kube_fault_proxy.rig.cluster.feature_gates import Gates

GATES = "gates:"
BUILD = "build:"
RELEASED = BUILD + "released"  # the target scheduler as released
PATCH = BUILD + "patch="  # build:patch=FILE: the target scheduler as released with FILE applied
PATCHED = {"yunikorn": "--yunikorn-patch", "kube-scheduler": "--kube-scheduler-patch"}  # scheduler -> its option
SEARCHABLE = ("kube-apiserver", "kube-scheduler", "kube-controller-manager")  # components whose gates a search sets
TARGETED = ("kube-scheduler", "kube-controller-manager")  # gates set only when the component is the target
# kube-controller-manager v1.36.3's stale-controller consistency (KEP-5647: Beta, on by default): a search of it with
# no gates of its own is controlled by the same build with all four off.
STALE_CONTROLLER_GATES = ("StaleControllerConsistencyDaemonSet", "StaleControllerConsistencyJob",
                          "StaleControllerConsistencyReplicaSet", "StaleControllerConsistencyStatefulSet")


def is_gates(control: str | None) -> bool:
    """Whether a control is the target's build with other gates."""
    return control is not None and control.startswith(GATES)


def is_build(control: str | None) -> bool:
    """Whether a control is another build of the target scheduler (`build:released`, `build:patch=FILE`)."""
    return control is not None and control.startswith(BUILD)


def build_patch(control: str) -> Path | None:
    """The patch a control by build applies to the release: FILE of `build:patch=FILE`, None for `build:released`."""
    return Path(control.removeprefix(PATCH)) if control.startswith(PATCH) else None


def parse_build(control: str, scheduler: str, patch: Path | None = None, source: Path | None = None) -> str:
    """A control by build checked against the target (its scheduler; its patch, `--yunikorn-patch` or
    `--kube-scheduler-patch`; `--yunikorn-source`) and normalised: `build:released`, or `build:patch=` with FILE's
    absolute path (for YuniKorn a shipped patch's name finds it, as with --yunikorn-patch). ValueError names the
    control and what is wrong."""
    body = control.removeprefix(BUILD)
    if control != RELEASED and not control.startswith(PATCH):
        raise ValueError(f"--control {control!r}: a control by build is {RELEASED} (the target scheduler as "
                         f"released, without the target's patch or source tree) or {PATCH}FILE (released with "
                         f"FILE applied); {body!r} is neither")
    if control.startswith(PATCH) and scheduler not in PATCHED:
        raise ValueError(f"--control {control}: a control by patch is the target scheduler as released with that "
                         f"patch; it needs --target {' or '.join(PATCHED)}")
    if patch is None and source is None:
        what = RELEASED if control == RELEASED else f"{PATCH}FILE"
        raise ValueError(f"--control {control}: the target is the released build already; {what} controls a "
                         "patched or source build (--yunikorn-patch, --yunikorn-source, --kube-scheduler-patch)")
    if control == RELEASED:
        return RELEASED
    given = body.removeprefix("patch=")
    if not given:
        raise ValueError(f"--control {control}: name the patch file ({PATCH}FILE, or a shipped patch's name: "
                         f"{', '.join(shipped.names(shipped.PATCHES / 'yunikorn', '.patch'))})")
    path = shipped.yunikorn_patch(Path(given)) if scheduler == "yunikorn" else Path(given)
    if not path.is_file():
        raise ValueError(f"--control {control}: {path} is no file (nor the name of a shipped patch)")
    patches.check_file(path, f"--control {control}")
    if patch is not None and patch.is_file() and patch.read_bytes() == path.read_bytes():
        raise ValueError(f"--control {control}: the target's {PATCHED[scheduler]} is the same patch, so the control "
                         "would be the target's own build; name the patch the target's is built on")
    return PATCH + str(path.resolve())


def target_gates(settings: Iterable[tuple[str, str, bool]], scheduler: str) -> Gates:
    """`--feature-gates` of a search as component -> gate -> on; ValueError names what a search cannot run."""
    gates = feature_gates.collect(settings)
    for component in gates:
        if component not in SEARCHABLE:
            raise ValueError(f"--feature-gates {component}:...: a search runs only {', '.join(SEARCHABLE)}")
        if component in TARGETED and scheduler != component:
            raise ValueError(f"--feature-gates {component}:... needs --target {component}")
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
        if component not in SEARCHABLE or (component in TARGETED and scheduler != component):
            raise ValueError(f"--control {control!r}: a search of {scheduler} cannot set {component}'s gates")
    return gates


def merged(target: Mapping[str, Mapping[str, bool]], changes: Mapping[str, Mapping[str, bool]]) -> Gates:
    """The control's gates: the target's, with the control's changes over them."""
    out = {c: dict(g) for c, g in target.items()}
    for component, gates in changes.items():
        out.setdefault(component, {}).update(gates)
    return out


def flipped(target: Mapping[str, Mapping[str, bool]], scheduler: str) -> str | None:
    """The default control of a search with gates: each of them the other way (None: no gates); of a
    kube-controller-manager search without gates: its stale-controller gates off."""
    if not target and scheduler == "kube-controller-manager":
        return GATES + ",".join(f"{g}=false" for g in STALE_CONTROLLER_GATES)
    parts = [f"{g}={'false' if on else 'true'}" if c == scheduler else f"{c}:{g}={'false' if on else 'true'}"
             for c, gs in sorted(target.items()) for g, on in sorted(gs.items())]
    return GATES + ",".join(parts) if parts else None


def same_as_target(target: Mapping[str, Mapping[str, bool]], changes: Mapping[str, Mapping[str, bool]]) -> bool:
    """Whether a control by gates changes nothing the target sets (then it is no control)."""
    return all(target.get(c, {}).get(g) == on for c, gs in changes.items() for g, on in gs.items())


def state_name(control: str) -> str:
    """A control rig's state directory name: `gates-SchedulerAsyncAPICalls-false`, `build-released`, and for
    `build:patch=FILE` `build-patch-` with FILE's name (not its directory)."""
    patch = build_patch(control)
    if patch is not None:
        return f"build-patch-{sources.patch_name(patch)}"
    return "".join(ch if ch.isalnum() else "-" for ch in control).strip("-")
