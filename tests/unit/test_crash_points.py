"""The crash points' addon (proxy.mitm.crash_points) alone: it holds an answer only when the fault addon stamped a
crash point's after-steps on the flow, journals the hold, and counts it as held for its client meanwhile."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from kube_fault_proxy.proxy.faults.plan import HoldAnswer, Respond, Wait
from kube_fault_proxy.proxy.mitm.crash_points import CrashPoints
from kube_fault_proxy.proxy.mitm.flow_keys import AFTER, DECISION, IDENT
from kube_fault_proxy.proxy.mitm.held import HeldAnswers
from kube_fault_proxy.proxy.requests.status import Reply

from tests.support.builders import bind
from tests.support.mitm import answer, binding


class Decided:
    """What the addon reads of a decision: its stamp."""

    def stamp(self) -> dict[str, Any]:
        return {"profile": "p", "rule": "crash"}


def test_only_a_stamped_crash_point_is_held(tmp_path: Path) -> None:
    notes: list[tuple[str, dict[str, Any]]] = []
    held = HeldAnswers()
    points = CrashPoints(lambda event, **fields: notes.append((event, fields)), held)

    async def main() -> None:
        plain = binding("a")
        plain.response = answer(201)
        assert points.response(plain) is None, "nothing stamped: passed on"
        other = binding("b")
        other.response = answer(201)
        other.metadata[AFTER] = (Wait(0.5), Respond(Reply(503, b"", ())))
        assert points.response(other) is None, "after-steps of another fault: not this addon's"
        f = binding("c")
        f.response = answer(201, b'{"kind":"Pod","metadata":{"resourceVersion":"9"}}')
        f.metadata.update({AFTER: (HoldAnswer(0.05),), DECISION: Decided(), IDENT: bind("c")})
        hold = points.response(f)
        assert hold is not None and notes == [], "nothing journaled before the hold runs"
        task = asyncio.ensure_future(hold)
        await asyncio.sleep(0.01)
        assert held.count(f.client_conn.id) == 1, "held for its client while it lasts"
        await task
        assert held.count(f.client_conn.id) == 0 and f.error is None
        assert [e for e, _ in notes] == ["crash-point", "crash-point-released"]
        point, released = notes[0][1], notes[1][1]
        assert (point["rule"], point["request"]["name"], point["resourceVersion"], point["holdSeconds"]) == (
            "crash", "c", "9", 0.05)
        assert released["outcome"] == "relayed" and released["upstreamStatus"] == 201

    asyncio.run(main())


def test_a_correlated_crash_points_record_names_what_to_kill() -> None:
    notes: list[tuple[str, dict[str, Any]]] = []
    points = CrashPoints(lambda event, **fields: notes.append((event, fields)), HeldAnswers())

    async def main() -> None:
        f = binding("c")
        f.response = answer(201)
        kill = (("scheduler", 1.0), ("kube-controller-manager", 5.0))
        f.metadata.update({AFTER: (HoldAnswer(0.01, kill),), DECISION: Decided(), IDENT: bind("c")})
        hold = points.response(f)
        assert hold is not None
        await hold

    asyncio.run(main())
    point = dict(notes)["crash-point"]
    assert point["kill"] == [{"component": "scheduler", "restartAfterSeconds": 1.0},
                             {"component": "kube-controller-manager", "restartAfterSeconds": 5.0}]
    assert "kill" not in dict(notes)["crash-point-released"]
