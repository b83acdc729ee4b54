"""A stored case run again: a search directory's minimal case (or one of its trials) and the rig it ran on.

`search replay` and `search orders` both start here: the case from search.json (or trials.jsonl), checked by the
strict loader, and a fresh control plane of the build the search ran (its scheduler, patch or source tree, gates,
release and workload kinds).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from kube_fault_proxy.rig.cluster import versions
from kube_fault_proxy.rig.search.controller_trial import WORKLOAD_KINDS
from kube_fault_proxy.rig.search.genome import Genome
from kube_fault_proxy.rig.search.trial import Rig
from kube_fault_proxy.rig.workloads.shapes import DEVICE_SHAPES, GANG_SHAPES


class CaseError(ValueError):
    """The directory holds no case to run (or not the one asked for)."""


def load_case(directory: Path, trial: str | None = None) -> tuple[dict[str, Any], Genome]:
    """search.json, and its minimal case or, with `trial`, that trial's genome from trials.jsonl."""
    try:
        doc = json.loads((directory / "search.json").read_text())
        if not isinstance(doc, dict) or "scheduler" not in doc:
            raise KeyError("scheduler")
        if trial is None:
            return doc, _genome(doc["minimal"], f"{directory / 'search.json'}: field 'minimal'")
        lines = (directory / "trials.jsonl").read_text().splitlines()
    except (OSError, KeyError, json.JSONDecodeError) as e:
        what = "a minimal case" if trial is None else "trials.jsonl"
        raise CaseError(f"{directory}: not a search directory with {what} ({e})") from None
    for i, line in enumerate(lines, 1):
        try:
            t = json.loads(line)
        except json.JSONDecodeError:
            continue  # a line cut by an interruption: never the trial asked for
        if t.get("name") == trial:
            return doc, _genome(t.get("genome"), f"{directory / 'trials.jsonl'}: line {i}, field 'genome'")
    raise CaseError(f"{directory / 'trials.jsonl'}: no trial named {trial!r}")


def _genome(stored: Any, where: str) -> Genome:
    try:
        genome = Genome.from_doc(stored, where)
    except ValueError as e:
        raise CaseError(str(e)) from None
    genome.profile()  # the strict loader, once more (ProfileError names the field)
    return genome


@contextmanager
def case_rig(doc: dict[str, Any], genome: Genome, state: Path, profiles: Path,
             nodes: int) -> Iterator[Rig]:
    """A fresh control plane of the build the search ran, `nodes` nodes, up for the block."""
    patch, source, own = (Path(doc[k]) if doc.get(k) else None
                          for k in ("yunikornPatch", "yunikornSource", "kubeSchedulerPatch"))
    gates = doc.get("featureGates") or {}  # the target's gates: the build it broke
    kinds = tuple(doc.get("workloads") or WORKLOAD_KINDS)  # kube-controller-manager's: the workloads it made
    release = doc.get("kubernetes") or versions.KUBERNETES  # a search written before releases ran the default
    with Rig.running(state / doc["scheduler"], doc["scheduler"], nodes, profiles, patch, source, gates, kinds,
                     release, devices=genome.shape in DEVICE_SHAPES, gangs=genome.shape in GANG_SHAPES,
                     kube_scheduler_patch=own) as rig:
        yield rig
