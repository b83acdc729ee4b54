"""The build a search puts under test: a patched or source-built YuniKorn (`--yunikorn-patch`,
`--yunikorn-source`) or a patched kube-scheduler (`--kube-scheduler-patch`), their checks, and the build of
every binary a search runs before its first trial (so a patch that does not apply fails there)."""

from __future__ import annotations

import argparse
from pathlib import Path

from kube_fault_proxy import shipped
from kube_fault_proxy.rig.cluster import build, patches
from kube_fault_proxy.rig.search import control as controls
from kube_fault_proxy.rig.search import waist
from kube_fault_proxy.rig.search.outcome import Settings

KUBE_SCHEDULER_PATCH = "--kube-scheduler-patch"


def add_arguments(p: argparse.ArgumentParser) -> None:
    """`--yunikorn-patch`, `--yunikorn-source` and `--kube-scheduler-patch`."""
    p.add_argument("--yunikorn-patch", type=lambda s: shipped.yunikorn_patch(Path(s)), metavar="FILE",
                   help="with --scheduler yunikorn: search v1.9.0 with this unified diff applied (see `cluster build`)")
    p.add_argument("--yunikorn-source", type=Path, metavar="DIR",
                   help="with --scheduler yunikorn: search a build of this yunikorn-k8shim checkout")
    p.add_argument(KUBE_SCHEDULER_PATCH, type=Path, metavar="FILE",
                   help="with --target kube-scheduler: search its release (--kubernetes) with this unified diff "
                        "applied to k8s.io/kubernetes, built and cached under its own name and hash (see `cluster "
                        "build kube-scheduler --patch`)")


def check(args: argparse.Namespace) -> None:
    """Each build option with the target it builds; a kube-scheduler patch read and parsed now (before anything is
    built), and never for a campaign, whose workers run the image's build. ValueError names the option and file."""
    if (args.yunikorn_patch or args.yunikorn_source) and args.scheduler != "yunikorn":
        raise ValueError("--yunikorn-patch and --yunikorn-source build the YuniKorn under test: "
                         "they need --scheduler yunikorn")
    patch = args.kube_scheduler_patch
    if patch is None:
        return
    if args.scheduler != "kube-scheduler":
        raise ValueError(f"{KUBE_SCHEDULER_PATCH} builds the kube-scheduler under test: it needs --target "
                         "kube-scheduler")
    if args.worker or args.on_cluster or args.print_job:
        raise ValueError(f"{KUBE_SCHEDULER_PATCH} builds on this machine; a campaign's workers run the image's "
                         "kube-scheduler (--workers, --on-cluster, --print-job)")
    patches.check_file(patch, f"{KUBE_SCHEDULER_PATCH} {patch}")


def target_patch(args: argparse.Namespace) -> Path | None:
    """The target's own patch, whichever scheduler it builds (what a control by build is checked against)."""
    patch: Path | None = args.yunikorn_patch or args.kube_scheduler_patch
    return patch


def build_all(s: Settings) -> None:
    """Build (or reuse) every binary the search runs, before its first trial: a patch that does not apply, or a
    patched build that does not compile, fails here (BuildInputError names the file). A patched kube-scheduler and
    a control's patched build each have their own cached binary, never the released one."""
    scheduler = (build.kube_scheduler(s.kube_scheduler_patch, s.kubernetes) if s.kube_scheduler_patch
                 else build.kubernetes("kube-scheduler", s.kubernetes))
    yunikorn = build.yunikorn(s.yunikorn_patch, s.yunikorn_source)
    names = ["etcd", "kube-apiserver", *{"yunikorn": ["yunikorn-scheduler"]}.get(s.scheduler, [])]
    if {"kube-scheduler", waist.CONTROLLER_MANAGER} & {s.scheduler, s.control}:
        names.append("kube-scheduler")
    build.build_all(names, overrides={**build.components(s.kubernetes), "yunikorn-scheduler": yunikorn,
                                      "kube-scheduler": scheduler})
    released = build.kubernetes("kube-scheduler", s.kubernetes)
    if s.control == controls.RELEASED and s.scheduler == "kube-scheduler" and s.kube_scheduler_patch:
        build.build_all(["kube-scheduler"], overrides={"kube-scheduler": released})  # the control's, as released
    base = controls.build_patch(s.control) if s.control is not None else None
    if base is not None and s.scheduler == "yunikorn":  # a control by patch: built now too
        build.build_all(["yunikorn-scheduler"], overrides={"yunikorn-scheduler": build.yunikorn(base)})
    elif base is not None:
        build.build_all(["kube-scheduler"], overrides={"kube-scheduler": build.kube_scheduler(base, s.kubernetes)})
