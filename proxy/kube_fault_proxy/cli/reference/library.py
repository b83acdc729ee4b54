"""Reference pages for what ships beside the code (profiles, scenarios, patches) and for the journal's records."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from kube_fault_proxy import shipped
from kube_fault_proxy.cli.reference.markdown import code, page, table, text
from kube_fault_proxy.proxy.profiles.loader import load_file
from kube_fault_proxy.rig.runs.scenario import load_scenario

# Every event the proxy writes to its journal, with what it means. tests/unit/test_reference.py reads the
# package's source for the events it journals and fails when one is missing here, or one here is gone.
JOURNAL_RECORDS = {
    "proxy-start": "the proxy started: version, proxy and upstream URLs, the library's profile names, the "
                   "scheduler build when `--scheduler-build` names it, and `journalTornBytesCut` when the last "
                   "line of the file was torn and cut",
    "proxy-stop": "the proxy stopped cleanly (the file is fsynced then)",
    "activate": "a profile was switched on: profile, epoch, seed, ttlSeconds, source (`api` or `cluster`, with the "
                "FaultActivation's name and generations) and the scheduler build",
    "deactivate": "back to pass-through: profile, epoch and reason (`api`, `ttl`, `replaced`, `cluster`)",
    "inject": "a fault was carried out: the decision's stamp (profile, epoch, seed, rule, fault, match, "
              "injection), the action, the request's identity and what the fault adds (`upstreamStatus` for "
              "commitThenFail, and `written` when the committed answer names its object: name, namespace, uid, "
              "resourceVersion and the controller `owner` (kind, name, uid); `servedResourceVersion`, "
              "`seenSecondsAgo`, `writesSince` for staleList, and for twoViews also `view`, `viewLag` and "
              "`connection`; `inFlight` for resetUpstream: the writes its "
              "connection had forwarded upstream and not yet answered, which the reset failed, each with verb, "
              "resource, subresource, namespace, name or a create's generateName and controller `owner`, the "
              "deciding rule and fault if any, and `upstreamStatus` if the apiserver's answer had arrived)",
    "commit-skipped": "a commitThenFail or crashPoint rule matched but the apiserver answered non-2xx: nothing was "
                      "committed, the answer passed through and the rule's turn was given back",
    "crash-point": "a crashPoint rule holds a committed write's answer: the stamp, request, upstreamStatus, the "
                   "committed object's resourceVersion and holdSeconds; kill the scheduler now",
    "crash-point-released": "a held answer's hold ended: `outcome` relayed (late) or dropped (the client had gone)",
    "watch-event": "a watch fault edited a stream: the stamp, the stream and the action: `dropped`, `duplicated`, "
                   "`cut` (after an event) or `cut-at-end` (when the apiserver ended it), `coalesced` (held, "
                   "delivered and elided counts), `delayed` (events, how late), `delay-cap` (released early, over "
                   "the cap), `held` (events, seconds, the event that released them); a release because the "
                   "activation ended has the reason `deactivated`",
    "watch-edits-end": "the activation that opened an edited watch ended (switched off, replaced, its TTL up): the "
                       "stamp, the stream and how many lines the editor had kept back and sent then (`released`); "
                       "the rest of the stream passes as the apiserver sends it",
    "stall-end": "a stall ended (`stall`: `stream` or `connection`): the stamp, the `reason` (`window`, "
                 "`deactivated`, `client-gone` or `client-closed` or `connection-lost` when the client left first, "
                 "`apiserver-ended` before a stream's silence began, `too-much-kept`), `stalledSeconds`; a stream's "
                 "`withheldBytes` and how it `end`ed (`proxy`, `apiserver`, `none`); a connection's "
                 "`keptToClientBytes` and `keptFromClientBytes` (sent and read as it healed, dropped when the client "
                 "left)",
    "watch-as-json": "a watch fault that edits events asked the apiserver for the watch in JSON, the form it reads, "
                     "since the client's Accept (`accept`, e.g. client-go's protobuf-first one) allows JSON too",
    "watch-unparsable": "a watch fault met a stream it cannot read (protobuf from a client that accepts nothing "
                        "else, compressed): it passes untouched; once per stream",
    "watch-undecodable": "a gzip-encoded watch (1.37's compressed WatchList) held bytes that are not gzip: the "
                         "revision log reads no more of it (`error`); the stream passes untouched; once per stream",
    "watch-uncompressed": "a watch fault that edits events asked the apiserver for the watch uncompressed (the "
                          "client's `acceptEncoding` removed): a 1.37 apiserver gzips a WatchList's stream otherwise",
    "request-unparsable": "a part of a request the proxy could not read (a Binding body that is not JSON, nested too "
                          "deep): decided as if absent, journaled once per kind",
    "upstream-lost": "an upstream connection died, so the matching client connection was closed; or, when the "
                     "proxy held answers of that client's (heldAnswers), drained: its held answers relayed first",
    "upstream-lost-drained": "a drained client connection closed after its held answers were relayed: whether it "
                             "was sent an HTTP/2 GOAWAY, and how many of its streams were still open (streamsCut)",
    "outage-start": "an outage began: seconds, how new connections are refused, the triggering rule, the "
                    "connections closed, the Binding counts at that moment and `inFlight`: the writes forwarded "
                    "upstream and not yet answered on every connection, which the outage failed (as for `inject`)",
    "outage-end": "an outage ended: connections refused, upstream connects failed, upstream connections aborted "
                  "and client connections still lingering",
    "client-timeout": "a client connection closed by `--read-header-timeout` or `--idle-timeout`",
    "feed-client-dropped": "a dashboard feed client that stopped reading for 5 s was dropped (its connection "
                           "aborted), with the bytes it had not taken",
    "stale-skipped": "a staleList rule matched but no revision old enough was known: the request passed unchanged",
    "view-pinned": "a twoViews rule pinned a client connection to a view, at the connection's first read it "
                   "matched: the stamp, `view` (0 or 1), `viewLag` and `otherViewLag` (each view's lag, `{}` for "
                   "view 0, the current state), `connection` (the proxy's id for it), `peer`, `client` (the user "
                   "agent) and `clientConnection` (the client's Nth connection this rule pinned)",
    "late-commit": "a failThenCommit write sent upstream after its client got the error: whether it committed, the "
                   "apiserver's status and the object's resourceVersion (and `written`, as for `inject`), or the error "
                   "that stopped it",
    "stale-compacted": "a staleList read asked for a revision etcd had compacted: the apiserver's 410 passed "
                       "through",
    "stale-refused": "a staleList read was refused by the apiserver otherwise; its answer passed through",
    "stale-unreadable": "a staleList read of one object came back in a form the proxy cannot read (content type)",
    "stale-not-found": "a staleList GET of an object that did not exist at that revision: 404",
    "cluster-watch-error": "with `--profiles-from-cluster`: a watch of FaultProfiles or FaultActivations failed "
                           "and restarts after a backoff",
    "cluster-profile-invalid": "with `--profiles-from-cluster`: a FaultProfile object the loader refuses (once per "
                               "version)",
    "cluster-activation-invalid": "with `--profiles-from-cluster`: a FaultActivation that cannot apply (once per "
                                  "version)",
}

_NOTED = re.compile(r'(?:journal\.append|\bnote)\(\s*"([a-z-]+)"(?:\s+if\s[^"\n]*else\s+"([a-z-]+)")?')


def journaled_events(package: Path) -> set[str]:
    """The event names the package's source journals (watch editors' actions under faults/ are not events)."""
    names: set[str] = set()
    for path in package.rglob("*.py"):
        if "faults" in path.parts or "rig" in path.parts:
            continue
        for match in _NOTED.finditer(path.read_text()):
            names |= {n for n in match.groups() if n}
    return names


def journal_page() -> str:
    """docs/reference/journal.md."""
    rows = [(code(event), text(meaning)) for event, meaning in JOURNAL_RECORDS.items()]
    return page("Journal records", "The journal is JSON Lines, one record per line, written and flushed to the "
                "operating system before the request it describes goes on (created 0600: it holds request paths "
                "and object names). Every record has `seq` (numbered continuously across restarts), `time` (Unix "
                "seconds) and `event`; `GET /v1/journal?since=SEQ` and `kube-fault-proxy ctl journal --since SEQ` "
                "read it.", [table(("event", "what it records"), rows)])


def _description(path: Path) -> str:
    data = yaml.safe_load(path.read_text())
    return str(data.get("metadata", {}).get("description", ""))


def _patch_summary(path: Path) -> str:
    header = path.read_text().split("\n--- ", 1)[0]
    return header.strip().split("\n\n", 1)[0]


def shipped_kinds() -> dict[str, list[str]]:
    """Each fault kind the shipped profiles use, with the names of the profiles that use it."""
    using: dict[str, list[str]] = {}
    for path in sorted(shipped.PROFILES.glob("*.yaml")):
        p = load_file(path)
        for kind in dict.fromkeys(rule.fault.spec.kind for rule in p.spec.rules):
            using.setdefault(kind, []).append(p.name)
    return using


def shipped_page() -> str:
    """docs/reference/shipped.md: the profile library, the scenarios and the YuniKorn patches the package ships."""
    profiles = []
    for path in sorted(shipped.PROFILES.glob("*.yaml")):
        p = load_file(path)
        incident = f" Stands for: {p.metadata.incident.strip()}." if p.metadata.incident else ""
        profiles.append((code(p.name), text(p.metadata.description.strip() + incident)))
    scenarios = []
    for path in sorted(shipped.SCENARIOS.glob("*.yaml")):
        s = load_scenario(path)
        scenarios.append((code(s.metadata.name), text(s.metadata.description.strip())))
    patches = [(code(p.name.removesuffix(".patch")), text(_patch_summary(p)))
               for p in sorted((shipped.PATCHES / "yunikorn").glob("*.patch"))]
    return page("Shipped profiles, scenarios and patches", "The package carries these; a command finds a profile "
                "library in `--profiles DIR`, else `./fault_profiles` where it runs, else the shipped one, and takes "
                "a shipped scenario or patch by its name.", [
                    "## Fault profiles\n\n" + table(("profile", "what it simulates"), profiles),
                    "## Scenarios\n\n" + table(("scenario", "what it runs"), scenarios),
                    "## YuniKorn patches (`--yunikorn-patch NAME`)\n\n" + table(("patch", "what it changes"), patches),
                ])
