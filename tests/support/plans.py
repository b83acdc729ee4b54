"""Reading a fault's plan in the unit tests."""

from __future__ import annotations

from kube_fault_proxy.proxy.faults.plan import Respond


def reply_of(step: object) -> tuple[int, dict[str, str], bytes]:
    """A Respond step's status, headers and body (anything else fails the test)."""
    assert isinstance(step, Respond)
    return step.reply.status, dict(step.reply.headers), step.reply.body
