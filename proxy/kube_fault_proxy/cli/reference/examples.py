"""One example rule per fault kind, shown in the fault kinds' reference as a whole profile.

tests/unit/test_reference_examples.py loads every example on the generated page with the profile loader, and
`reference.undescribed()` names a kind that has none here."""

from __future__ import annotations

BINDING = "{verbs: [create], resources: [pods], subresources: [binding]}"

# kind -> one rule, as written under `spec.rules` (the reference indents it into a profile)
RULES: dict[str, str] = {
    "abort": f"""\
- name: fail-binds
  match: {BINDING}
  probability: 0.3
  fault:
    abort: {{status: 500}}
""",
    "throttle": """\
- name: throttle-lists
  match: {verbs: [list], resources: [pods, nodes]}
  fault:
    throttle: {retryAfterSeconds: 2}
""",
    "delay": f"""\
- name: slow-binds
  match: {BINDING}
  fault:
    delay: {{seconds: 1.5, jitterSeconds: 0.5, phase: response}}
""",
    "hang": f"""\
- name: binds-hang-then-time-out
  match: {BINDING}
  when: {{maxInjections: 5}}
  fault:
    hang: {{seconds: 30, then: timeout}}
""",
    "reset": """\
- name: reset-pod-status-patches
  match: {verbs: [patch], resources: [pods], subresources: [status]}
  probability: 0.2
  fault:
    reset: {}
""",
    "commitThenFail": f"""\
- name: bind-commits-then-504
  match: {BINDING}
  when: {{every: 3}}
  fault:
    commitThenFail:
      abort: {{status: 504}}
""",
    "expire": """\
- name: expire-resumed-pod-watches
  match: {verbs: [watch], resources: [pods]}
  fault:
    expire: {onlyRewatch: true}
""",
    "cut": """\
- name: cut-watches-every-30s
  match: {verbs: [watch]}
  fault:
    cut: {afterSeconds: 30}
""",
    "dropEvents": """\
- name: drop-pod-updates
  match: {verbs: [watch], resources: [pods]}
  fault:
    dropEvents:
      events: {types: [MODIFIED]}
      probability: 0.5
""",
    "duplicateEvents": """\
- name: duplicate-bound-pod-events
  match: {verbs: [watch], resources: [pods]}
  fault:
    duplicateEvents:
      events: {types: [MODIFIED], hasNodeName: true}
""",
    "outage": f"""\
- name: apiserver-gone-at-bind-200
  match: {BINDING}
  when:
    maxInjections: 1
    trigger: {{match: {BINDING}, count: 200}}
  fault:
    outage: {{seconds: 10, refuse: refuse}}
""",
    "resetUpstream": f"""\
- name: drop-connection-at-first-bind
  match: {BINDING}
  when: {{maxInjections: 1}}
  fault:
    resetUpstream: {{}}
""",
    "staleList": """\
- name: pods-10s-behind
  match: {verbs: [list, get], resources: [pods]}
  when: {maxInjections: 20}
  fault:
    staleList: {lagSeconds: 10}
""",
    "twoViews": """\
- name: two-apiservers-one-3s-behind
  match: {verbs: [list, get, watch], resources: [pods, nodes]}
  fault:
    twoViews: {lagSeconds: 3}
""",
    "coalesceEvents": """\
- name: pod-watches-in-2s-batches
  match: {verbs: [watch], resources: [pods]}
  fault:
    coalesceEvents: {windowSeconds: 2}
""",
    "crashPoint": f"""\
- name: hold-the-200th-bind
  match: {BINDING}
  when:
    trigger: {{match: {BINDING}, count: 200}}
  fault:
    crashPoint: {{holdSeconds: 30}}
""",
    "delayEvents": """\
- name: node-events-2s-late
  match: {verbs: [watch], resources: [nodes]}
  fault:
    delayEvents: {seconds: 2, jitterSeconds: 0.5}
""",
    "failThenCommit": f"""\
- name: bind-times-out-then-commits
  match: {BINDING}
  when: {{afterMatches: 5, maxInjections: 1}}
  fault:
    failThenCommit: {{status: 504, commitAfterSeconds: 3}}
""",
    "holdEvents": """\
- name: nodes-behind-pods
  match: {verbs: [watch], resources: [nodes]}
  fault:
    holdEvents:
      maxSeconds: 5
      untilEvent: {resource: pods, events: {types: [MODIFIED], hasNodeName: true}}
""",
    "watchList": """\
- name: pod-watchlists-bookmark-30s-late
  match: {verbs: [watch], resources: [pods]}
  when: {maxInjections: 2}
  fault:
    watchList: {mode: delay, seconds: 30}
""",
    "stallStream": """\
- name: pods-watch-goes-silent
  match: {verbs: [watch], resources: [pods]}
  when: {maxInjections: 1}
  fault:
    stallStream: {afterEvents: 1, for: 10m}
""",
    "stallConnection": f"""\
- name: connection-stops-answering
  match: {BINDING}
  when: {{maxInjections: 1}}
  fault:
    stallConnection: {{for: 2m}}
""",
}


def kebab(kind: str) -> str:
    """`commitThenFail` -> `commit-then-fail`."""
    return "".join(f"-{c.lower()}" if c.isupper() else c for c in kind)


def profile(kind: str) -> str:
    """The kind's example rule in a whole profile file, as the reference shows it."""
    rule = "".join(f"    {line}\n" for line in RULES[kind].splitlines())
    return (f"apiVersion: kube-fault-proxy/v1\nkind: FaultProfile\nmetadata:\n  name: example-{kebab(kind)}\n"
            f"spec:\n  rules:\n{rule}")
