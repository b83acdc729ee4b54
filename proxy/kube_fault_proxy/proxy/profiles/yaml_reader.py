"""YAML text to plain data with every key's and value's position, within bounds checked before
anything expands (size, characters, aliases, depth, values, digits); fails only with ProfileError."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import yaml
from yaml.composer import Composer
from yaml.constructor import SafeConstructor
from yaml.events import AliasEvent, MappingStartEvent, SequenceStartEvent
from yaml.resolver import Resolver

from kube_fault_proxy.proxy.profiles.problems import Loc, Problem, ProfileError, format_path

try:  # libyaml's scanner is ~10x faster; the composer that enforces the bounds is always ours
    from yaml._yaml import CParser as _Parser
except ImportError:  # pragma: no cover - PyYAML built without libyaml

    class _Parser(yaml.reader.Reader, yaml.scanner.Scanner, yaml.parser.Parser):  # type: ignore[no-redef]
        """PyYAML's own event source, when it was built without libyaml."""

        def __init__(self, text: str) -> None:
            yaml.reader.Reader.__init__(self, text)
            yaml.scanner.Scanner.__init__(self)
            yaml.parser.Parser.__init__(self)

Mark = tuple[int, int]  # 1-based line, column
INT_TAG = "tag:yaml.org,2002:int"
COLLECTION_TAGS: dict[type[yaml.Node], str] = {
    yaml.MappingNode: "tag:yaml.org,2002:map",
    yaml.SequenceNode: "tag:yaml.org,2002:seq",
}
# What YAML 1.1 calls printable; anything else is refused up front with its position.
_UNPRINTABLE = re.compile("[^\x09\x0a\x0d\x20-\x7e\x85\xa0-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


@dataclass(frozen=True, slots=True)
class Limits:
    """How much a document may hold; far above any real profile, far below harm."""

    max_bytes: int = 256 * 1024
    max_depth: int = 32  # nested mappings and sequences
    max_aliases: int = 8  # a profile has no use for more than a few
    max_nodes: int = 20_000  # keys, values and items (a 256-rule profile has ~5,000)
    max_int_digits: int = 64


LIMITS = Limits()


class _Bounded(Exception):
    """A limit was hit at a position while composing."""

    def __init__(self, mark: Any, message: str) -> None:
        super().__init__(message)
        self.mark = mark
        self.message = message


class _Loader(Composer, _Parser, SafeConstructor, Resolver):
    """Our composer over libyaml's events: counts aliases and depth before it recurses."""

    def __init__(self, text: str, limits: Limits) -> None:
        _Parser.__init__(self, text)
        Composer.__init__(self)
        SafeConstructor.__init__(self)
        Resolver.__init__(self)
        self.limits = limits
        self.aliases = 0
        self.depth = 0
        self.nodes = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        event = self.peek_event()
        assert event is not None  # the composer only asks for a node where one follows
        self.nodes += 1
        if self.nodes > self.limits.max_nodes:
            raise _Bounded(event.start_mark, f"more than {self.limits.max_nodes:,} values")
        if isinstance(event, AliasEvent):
            self.aliases += 1
            if self.aliases > self.limits.max_aliases:
                raise _Bounded(event.start_mark, f"more than {self.limits.max_aliases} aliases")
            return super().compose_node(parent, index)
        if not isinstance(event, MappingStartEvent | SequenceStartEvent):
            return super().compose_node(parent, index)
        self.depth += 1
        if self.depth > self.limits.max_depth:
            raise _Bounded(event.start_mark, f"nested more than {self.limits.max_depth} levels deep")
        try:
            return super().compose_node(parent, index)
        finally:
            self.depth -= 1


class Positions:
    """Where each key and value of a composed YAML document sits."""

    def __init__(self) -> None:
        self.keys: dict[Loc, Mark] = {}
        self.values: dict[Loc, Mark] = {}

    def lookup(self, loc: Loc, at_key: bool) -> Mark | None:
        """The mark of loc (its key if asked and known), else of its nearest known ancestor."""
        if at_key and loc in self.keys:
            return self.keys[loc]
        for n in range(len(loc), -1, -1):
            if loc[:n] in self.values:
                return self.values[loc[:n]]
        return None


def _mark(node: yaml.Node) -> Mark:
    return node.start_mark.line + 1, node.start_mark.column + 1


class _Builder:
    """Plain data from a node graph, recording positions, counting nodes, refusing duplicate keys."""

    def __init__(self, loader: _Loader, source: str) -> None:
        self.loader = loader
        self.source = source
        self.pos = Positions()
        self.nodes = 0

    def _fail(self, node: yaml.Node, loc: Loc, message: str) -> ProfileError:
        line, col = _mark(node)
        return ProfileError([Problem(self.source, line, col, format_path(loc), message)])

    def build(self, node: yaml.Node, loc: Loc) -> Any:
        limits = self.loader.limits
        self.nodes += 1
        if self.nodes > limits.max_nodes:
            raise self._fail(node, loc, f"refused: more than {limits.max_nodes:,} values once aliases are expanded")
        self.pos.values[loc] = _mark(node)
        if type(node) in COLLECTION_TAGS and node.tag != COLLECTION_TAGS[type(node)]:
            raise self._fail(node, loc, f"tag {node.tag!r} is not supported here")
        if isinstance(node, yaml.MappingNode):
            self.loader.flatten_mapping(node)
            out: dict[Any, Any] = {}
            for key_node, value_node in node.value:
                key = self._scalar(key_node, loc) if isinstance(key_node, yaml.ScalarNode) else None
                if not isinstance(key, str | int) or isinstance(key, bool):
                    raise self._fail(key_node, loc, "keys must be strings")
                if key in out:
                    raise self._fail(key_node, (*loc, key), "duplicate key")
                self.pos.keys[(*loc, key)] = _mark(key_node)
                out[key] = self.build(value_node, (*loc, key))
            return out
        if isinstance(node, yaml.SequenceNode):
            return [self.build(n, (*loc, i)) for i, n in enumerate(node.value)]
        return self._scalar(node, loc)

    def _scalar(self, node: yaml.Node, loc: Loc) -> Any:
        if node.tag == INT_TAG and len(str(node.value)) > self.loader.limits.max_int_digits:
            raise self._fail(node, loc, f"integer longer than {self.loader.limits.max_int_digits} digits")
        try:
            return self.loader.construct_object(node, deep=True)
        except yaml.MarkedYAMLError:
            raise
        except (ValueError, OverflowError, TypeError) as e:  # e.g. a timestamp on 30 February
            raise self._fail(node, loc, f"cannot read this value: {e}") from None


def _position(text: str, index: int) -> Mark:
    line = text.count("\n", 0, index) + 1
    return line, index - (text.rfind("\n", 0, index) + 1) + 1


def _check_text(text: str, source: str, limits: Limits) -> None:
    size = len(text.encode("utf-8", errors="surrogatepass"))
    if size > limits.max_bytes:
        raise ProfileError([Problem(source, None, None, "",
                                    f"{size:,} bytes is too large (at most {limits.max_bytes:,})")])
    bad = _UNPRINTABLE.search(text)
    if bad is not None:
        line, col = _position(text, bad.start())
        char = ord(bad.group())
        raise ProfileError([Problem(source, line, col, "", f"character U+{char:04X} is not allowed in YAML")])


def compose(text: str, source: str, limits: Limits = LIMITS) -> tuple[Any, Positions]:
    """Plain data from YAML text, and where each key and value sits; raises ProfileError only."""
    _check_text(text, source, limits)
    loader: _Loader | None = None
    try:
        loader = _Loader(text, limits)
        node = loader.get_single_node()
        if node is None:
            raise ProfileError([Problem(source, None, None, "", "empty document")])
        builder = _Builder(loader, source)
        return builder.build(node, ()), builder.pos
    except _Bounded as e:
        line, col = e.mark.line + 1, e.mark.column + 1
        raise ProfileError([Problem(source, line, col, "", f"refused: {e.message}")]) from None
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        line, col = (mark.line + 1, mark.column + 1) if mark else (None, None)
        raise ProfileError(
            [Problem(source, line, col, "", f"not valid YAML: {e.problem or e.context}")]
        ) from None
    except yaml.YAMLError as e:
        raise ProfileError([Problem(source, None, None, "", f"not valid YAML: {e}")]) from None
    except RecursionError:  # cannot happen within max_depth; kept so no input escapes as a crash
        raise ProfileError([Problem(source, None, None, "", "refused: nested too deep")]) from None
    finally:
        if loader is not None:
            loader.dispose()
