"""The live feed in the OpenAPI document: its stream, each event of it, and the JSON each event carries."""

from __future__ import annotations

from typing import Any

from kube_fault_proxy.proxy.control.feed import COUNTED

_OBJECT: dict[str, Any] = {"type": "object"}
_COUNTS = {"type": "object", "additionalProperties": {"type": "integer"}}

FRAME: dict[str, Any] = {
    "title": "FeedFrame",
    "description": "One sample of the proxy: the `snapshot` frame carries the newest 200 journal records "
                   "and `interval`, each `tick` the records since the frame before.",
    "type": "object",
    "additionalProperties": False,
    "required": ["seq", "time", "active", "rules", "totals", "rates", "connections", "outage", "events",
                 "journal", "journalSkipped", "journalSeq", "library"],
    "properties": {
        "seq": {"type": "integer", "minimum": 1, "description": "the frame's number, as its event id"},
        "time": {"type": "number", "description": "wall clock, seconds since the epoch"},
        "active": {**_OBJECT, "description": "as GET /v1/active", "required": ["profile", "epoch"]},
        "rules": {"type": "object", "additionalProperties": _COUNTS, "description": "per rule of the active profile"},
        "totals": {"type": "object", "additionalProperties": False, "required": list(COUNTED),
                   "properties": {k: {"type": "integer", "minimum": 0} for k in COUNTED}},
        "rates": {"type": "object", "additionalProperties": False, "required": list(COUNTED),
                  "properties": {k: {"type": "number"} for k in COUNTED}, "description": "per second"},
        "connections": {"type": ["object", "null"], "description": "as in GET /v1/stats, when the proxy counts them"},
        "outage": {**_OBJECT, "required": ["active"], "description": "the current or the last outage"},
        "events": {**_COUNTS, "description": "proxy events by kind, as in GET /v1/stats"},
        "journal": {"type": "array", "items": _OBJECT, "description": "journal records, oldest first"},
        "journalSkipped": {"type": "integer", "minimum": 0, "description": "records left out of `journal`"},
        "journalSeq": {"type": "integer", "minimum": 0, "description": "the last record seen"},
        "library": {"type": "array", "description": "[name, fingerprint] per profile: changes when one does",
                    "items": {"type": "array", "prefixItems": [{"type": "string"}, {"type": "integer"}],
                              "minItems": 2, "maxItems": 2}},
        "interval": {"type": "number", "exclusiveMinimum": 0, "description": "seconds between ticks (snapshot only)"},
    },
}

# Each event of the stream; OpenAPI 3.2 names this `itemSchema`, before it `schema` describes the
# whole body: a text of events.
EVENT: dict[str, Any] = {
    "type": "object",
    "required": ["event", "id", "data"],
    "properties": {
        "event": {"enum": ["snapshot", "tick"]},
        "id": {"type": "string", "pattern": "^[0-9]+$"},
        "data": {"type": "string", "contentMediaType": "application/json",
                 "contentSchema": {"$ref": "#/components/schemas/FeedFrame"}},
    },
}

STREAM_DOC: dict[str, Any] = {"responses": {200: {
    "description": "`retry: 1000`, then a `snapshot` event and a `tick` every interval, each with one FeedFrame "
                   "as JSON in its `data`; a client that stops reading is dropped (the manual: the control plane and "
                   "the dashboard)",
    "content": {"text/event-stream": {"schema": {"type": "string"}, "itemSchema": EVENT}},
}}}
