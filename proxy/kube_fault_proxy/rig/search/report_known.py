"""The report's account of known findings: each known bug hit (its count, where it is reported), the hits that
were the faults' own effect, and how the budget was shared between them and new ground."""

from __future__ import annotations

from kube_fault_proxy.rig.search.outcome import Outcome


def known_lines(out: Outcome) -> list[str]:
    """The `Known findings` section (nothing when there is nothing to say)."""
    effects = [h for h in out.hits if h.verdict == "excused"]
    shares = out.spent.as_dict()
    total = sum(v["seconds"] for v in shares.values()) or 1.0
    budget = "; ".join(f"{label}: {shares[key]['trials']} trials, {shares[key]['seconds']:.0f} s "
                       f"({shares[key]['seconds'] / total:.0%})"
                       for key, label in (("known", "known bugs"), ("faultEffect", "the faults' own effect"),
                                          ("newGround", "new ground")))
    lines = ["## Known findings", "",
             f"- budget (search steps and their trial seconds, each with its replay and control): {budget}"]
    if out.settings.include_known:
        lines.append("- `--include-known`: hits of known bugs were confirmed, shrunk and replayed like any other")
    for k in out.known.values():
        e = k.entry
        confirmed = f"confirmed once at trial {k.confirmed_at}" if k.confirmed_at is not None else "not confirmed"
        hits = f"{len(k.trials)} hit{'s' if len(k.trials) != 1 else ''}"
        lines.append(f"- **known: {e.id}** ({e.title}): {hits} (trials "
                     f"{', '.join(map(str, k.trials))}), {confirmed}, not shrunk; provoked by "
                     f"{e.signature.provocation()}; upstream: {e.upstream}"
                     + (f"; report: {e.report}" if e.report else ""))
    for h in effects:
        lines.append(f"- trial {h.trial}: {', '.join(h.broken)} is the fault's own effect, not a bug (the ledger "
                     f"excuses it): {h.known}")
    if not out.known and not effects:
        lines.append("- no hit matched a known bug or was the faults' own effect")
    return [*lines, ""]
