"""The strict base model and unit-carrying value types every profile field is built from."""

from __future__ import annotations

import re
from decimal import Decimal
from typing import Annotated

from pydantic import BaseModel, BeforeValidator, ConfigDict, PlainSerializer, WithJsonSchema
from pydantic.config import JsonDict

_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h)")
_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


class StrictModel(BaseModel):
    """No unknown keys, no type coercion, immutable once loaded."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True, populate_by_name=True)


def exactly_one_of(*names: str) -> JsonDict:
    """JSON Schema for "exactly one of these keys is set", beside the validator that enforces it
    (the CRDs carry it, so the apiserver refuses what the loader refuses)."""
    return {"oneOf": [{"required": [name]} for name in names]}


# A duration longer than zero has a non-zero digit: a second pattern on top of the Duration one.
NON_ZERO_DURATION: JsonDict = {"allOf": [{"pattern": "[1-9]"}]}


def parse_duration(value: object) -> float:
    """'1m30s', '250ms', '10s' → seconds; a bare number is refused because it has no unit."""
    if isinstance(value, bool) or not isinstance(value, str):
        raise ValueError(f"a duration needs a unit, like '10s' or '250ms' (got {value!r})")
    text = value.strip()
    pos, total = 0, 0.0
    for m in _DURATION.finditer(text):
        if m.start() != pos:
            break
        total += float(m.group(1)) * _UNIT_SECONDS[m.group(2)]
        pos = m.end()
    if not text or pos != len(text):
        raise ValueError(f"not a duration: {value!r} (use e.g. '10s', '1m30s', '250ms')")
    return total


def format_duration(seconds: float) -> str:
    """Seconds → the shortest duration string that reads back the same (no exponent: `:g` wrote 1e-05s)."""
    text = format(Decimal(repr(seconds)), "f")
    return f"{text.removesuffix('.0')}s"


Duration = Annotated[
    float,
    BeforeValidator(parse_duration),
    PlainSerializer(format_duration, return_type=str),
    WithJsonSchema({"type": "string", "pattern": r"^(\d+(\.\d+)?(ms|s|m|h))+$", "example": "10s"}),
]
