"""How often `search --actions all` draws each trial action: `deletePod`, the one pod action, a third of the draws
(it was a fifth, and the recorded seed-47 YuniKorn search drew it in none of its 26 draws)."""

from __future__ import annotations

import collections

from kube_fault_proxy.rig.actions.trial_churn import parse_actions
from kube_fault_proxy.rig.search import waist
from kube_fault_proxy.rig.search.grammar import mutate_churn, random_genome, trial_rng

KINDS = ("abort", "throttle", "delay", "hang", "reset", "commitThenFail", "expire", "cut", "dropEvents",
         "duplicateEvents", "outage", "resetUpstream", "crashPoint")  # the recorded search's --kinds
SHAPES = ("roomy", "exact-fill", "mixed", "tainted", "anti-affinity")


def test_actions_all_draws_delete_pod_a_third_of_the_time() -> None:
    """The pod action against four node actions: weighted 2 of 6 (it was 1 draw in 5, and the recorded seed-47
    search drew it in none of its 26 draws)."""
    actions = parse_actions("all", True, "yunikorn")
    assert "deletePod" in actions
    w = waist.of("yunikorn", SHAPES)
    drawn: collections.Counter[str] = collections.Counter()
    genomes = 0
    for seed in (47, 4747):
        for i in range(300):
            g = random_genome(trial_rng(seed, i), KINDS, 100, SHAPES, w, actions)
            genomes += bool(g.churn)
            drawn.update(a["do"] for a in g.churn)
    total = sum(drawn.values())
    assert 250 <= genomes <= 350 and total > 350  # half the genomes carry actions, a third of them two
    assert 0.28 <= drawn["deletePod"] / total <= 0.39, drawn  # 1/3 expected
    for name in ("deleteNode", "flapNode", "resizeNode", "cordonNode"):
        assert 0.11 <= drawn[name] / total <= 0.23, drawn  # 1/6 each
    # A mutation that adds or redraws an action draws it by the same weights.
    mutated = collections.Counter(a["do"] for i in range(400) for a in mutate_churn(
        trial_rng(47, i), (), actions, 100, ["outage"]))
    assert 0.28 <= mutated["deletePod"] / sum(mutated.values()) <= 0.39, mutated
