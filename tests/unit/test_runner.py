"""The runner's pure parts: journal records as run events."""

from __future__ import annotations

from kube_fault_proxy.rig.runner import journal_event


def test_a_journal_record_is_placed_when_the_proxy_wrote_it_not_when_it_was_read() -> None:
    record = {"seq": 4, "time": 1020.06, "event": "outage-start", "bindsSucceeded": 395, "request": {"path": "/x"}}
    # the run began at wall-clock 1000.0; the sampler's read of the journal started 18.74 s in
    assert journal_event(record, 18.74, 1000.0) == {"t": 20.06, "seq": 4, "time": 1020.06, "event": "outage-start",
                                                    "bindsSucceeded": 395}
    assert journal_event({"event": "outage-end"}, 31.2, 1000.0) == {"t": 31.2, "event": "outage-end"}  # no time: read
    assert journal_event({"time": 999.5, "event": "activate"}, 0.1, 1000.0)["t"] == 0.0  # never before the run
