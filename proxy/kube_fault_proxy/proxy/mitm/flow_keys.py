"""The `flow.metadata` keys by which the addons of serve's chain tell each other about a request.

The fault addon identifies each request and stamps what it is and what was decided for it; the addon that owns
a behaviour (a stale view, a watch edit, a late commit, a crash point's hold, an outage) reads the decision here,
in a hook of its own, and acts on it. No addon calls another: what one learns from another is under one of these
keys.
"""

from __future__ import annotations

IDENT = "kfp.identity"  # RequestIdentity: what the request is (its verb, resource, object, client)
DECISION = "kfp.decision"  # Decision: the active profile's decision for it (absent: passed through)
EDITOR = "kfp.editor"  # EventEditor: the watch's events are edited as they stream (the watch edits stamp it)
STALE = "kfp.stale"  # Served: a stale read as it was sent, its answer checked when it comes (the stale views')
INITIAL = "kfp.initial-events"  # bytes: a stale WatchList's initial events, sent before its watch's own
AFTER = "kfp.after"  # tuple[Step, ...]: the decision's after-steps, once the apiserver's answer lets them go ahead
