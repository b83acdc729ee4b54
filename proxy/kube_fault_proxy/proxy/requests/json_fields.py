"""A few string fields of a JSON document of any depth, read as `json.loads` would read them had it no
recursion limit, without building the document: one pass over its tokens, time and memory linear in
the text (about 0.5 µs a token), one byte a level for the nesting; what is skipped is only checked."""

from __future__ import annotations

import json
import re
from collections.abc import Collection
from dataclasses import dataclass, field

FieldPath = tuple[str, ...]  # object keys from the top, e.g. ("target", "name")

# A token: punctuation, a string, a bare word (a number or a literal, checked below), or any other
# character, which is never JSON. Whitespace between tokens is what json.loads allows, and only that.
TOKEN = re.compile(r'[\[\]{},:]|"(?:[^"\\\x00-\x1f]++|\\["\\/bfnrt]|\\u[0-9a-fA-F]{4})*+"'
                   r'|[^ \t\n\r\[\]{},:"]++|[^ \t\n\r]')
NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*+)(?:\.[0-9]++)?(?:[eE][-+]?[0-9]++)?")
LITERALS = frozenset({"true", "false", "null", "NaN", "Infinity", "-Infinity"})  # json.loads' own
ARRAY, OBJECT = ord("["), ord("{")
VALUE, FIRST_ELEMENT, FIRST_KEY, KEY, COLON, AFTER = range(6)


class NotJSON(ValueError):
    """The text is not one JSON value."""


@dataclass
class Picked:
    """The strings at the wanted paths (a repeated key: the last one, as json.loads keeps), and the
    paths on the way whose value, not an object, nested deeper than the limit."""

    values: dict[FieldPath, str] = field(default_factory=dict)
    too_deep: set[FieldPath] = field(default_factory=set)


class JSONFields:
    """Reads the strings at a few paths of JSON documents; built once for its paths."""

    def __init__(self, wanted: Collection[FieldPath], max_depth: int = 1000) -> None:
        self.wanted = frozenset(wanted)
        self.walk = frozenset(p[:i] for p in self.wanted for i in range(len(p)))  # objects read key by key
        self.on_the_way = self.wanted | self.walk
        self.max_depth = max_depth

    def pick(self, text: str) -> Picked:
        """The strings at the wanted paths; raises NotJSON for anything but one JSON value.

        When the standard decoder reads the document and every wanted path holds a string, its answer is
        the answer (a Binding in ~4 µs, against ~10 µs a token at a time): each object on the way is then
        an object, so nothing on the way nests too deep. Anything else goes to the token reader, which
        decides: a document the decoder refuses (nested past its C recursion limit, ~1,500 levels, or
        with a number too long to convert, or not JSON at all), or one missing a wanted string (where
        how deep a value on the way nests still matters, past max_depth)."""
        try:
            doc = json.loads(text)
        except (ValueError, RecursionError):
            return _Reader(self).read(text)
        picked = Picked()
        for path in self.wanted:
            value = doc
            for key in path:
                value = value.get(key) if isinstance(value, dict) else None
            if not isinstance(value, str):
                return _Reader(self).read(text)
            picked.values[path] = value
        return picked


class _Reader:
    """One pass over one text's tokens; a value off the wanted paths is only checked and skipped."""

    def __init__(self, fields: JSONFields) -> None:
        self.fields = fields
        self.picked = Picked()
        self.stack = bytearray()  # ARRAY or OBJECT per open container
        self.walked: list[FieldPath] = []  # the open objects read key by key: the bottom of the stack
        self.skip_from = -1  # the depth a skipped container began at, -1 when none is open
        self.skip_path: FieldPath | None = None  # its path, when the depth of it is worth keeping
        self.deepest = 0  # how deep the skipped container nests

    def _forget(self, path: FieldPath) -> None:
        """A key seen again: what its earlier value held does not count (the last one wins)."""
        for earlier in [p for p in self.picked.values if p[: len(path)] == path]:
            del self.picked.values[earlier]
        self.picked.too_deep = {p for p in self.picked.too_deep if p[: len(path)] != path}

    def _open(self, bracket: int, path: FieldPath | None) -> int:
        stack = self.stack
        if bracket == OBJECT and self.skip_from < 0 and path is not None and path in self.fields.walk:
            self.walked.append(path)
            stack.append(OBJECT)
            return FIRST_KEY
        if self.skip_from < 0:
            self.skip_from, self.deepest = len(stack), 0
            self.skip_path = path if path in self.fields.on_the_way else None
        stack.append(bracket)
        self.deepest = max(self.deepest, len(stack) - self.skip_from)
        return FIRST_KEY if bracket == OBJECT else FIRST_ELEMENT

    def _close(self, bracket: int) -> int:
        stack = self.stack
        if not stack or stack[-1] != bracket:
            raise NotJSON("a closing bracket that closes nothing open")
        stack.pop()
        if self.skip_from < 0:
            self.walked.pop()
        elif len(stack) == self.skip_from:
            if self.skip_path is not None and self.deepest > self.fields.max_depth:
                self.picked.too_deep.add(self.skip_path)
            self.skip_from = -1
        return AFTER

    def read(self, text: str) -> Picked:
        """Check every token and keep the wanted strings; raises NotJSON at the first one out of place."""
        wanted, on_the_way = self.fields.wanted, self.fields.on_the_way
        state = VALUE
        path: FieldPath | None = ()  # where the next value sits, while it is on a walked object
        for token in TOKEN.findall(text):
            c = token[0]
            if state == AFTER:
                if c == "," and self.stack:
                    state = KEY if self.stack[-1] == OBJECT else VALUE
                elif c in "]}":
                    state = self._close(ARRAY if c == "]" else OBJECT)
                else:
                    raise NotJSON(f"{token[:20]!r} where ',' or a closing bracket belongs")
            elif state == COLON:
                if c != ":":
                    raise NotJSON(f"{token[:20]!r} where ':' belongs")
                state = VALUE
            elif state in (KEY, FIRST_KEY):
                if c == '"' and len(token) > 1:
                    if self.skip_from < 0:
                        path = (*self.walked[-1], _string(token))
                        if path in on_the_way:
                            self._forget(path)
                    state = COLON
                elif c == "}" and state == FIRST_KEY:
                    state = self._close(OBJECT)
                else:
                    raise NotJSON(f"{token[:20]!r} where a key belongs")
            elif c in "[{":
                state, path = self._open(ARRAY if c == "[" else OBJECT, path), None
            elif c == "]" and state == FIRST_ELEMENT:
                state = self._close(ARRAY)
            elif (c == '"' and len(token) > 1) or token in LITERALS or NUMBER.fullmatch(token):
                if c == '"' and path is not None and path in wanted:
                    self.picked.values[path] = _string(token)
                state, path = AFTER, None
            else:
                raise NotJSON(f"{token[:20]!r} where a value belongs")
        if state != AFTER or self.stack:
            raise NotJSON("the text ends before its value does")
        return self.picked


def _string(token: str) -> str:
    return token[1:-1] if "\\" not in token else str(json.loads(token))
