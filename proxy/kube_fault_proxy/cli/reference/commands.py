"""The command-line reference, read from the argument parser itself: every command, option and default."""

from __future__ import annotations

import argparse
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from kube_fault_proxy.cli.reference.markdown import code, page, table, text

# The state directory's default depends on who runs the generator; the reference shows the default as written.
STATE_DIR_SHOWN = "~/.local/state/kube-fault-proxy"


@contextmanager
def _default_state_dir() -> Iterator[None]:
    saved = os.environ.get("KFP_STATE_DIR")
    os.environ["KFP_STATE_DIR"] = STATE_DIR_SHOWN
    try:
        yield
    finally:
        if saved is None:
            del os.environ["KFP_STATE_DIR"]
        else:
            os.environ["KFP_STATE_DIR"] = saved


def full_parser() -> argparse.ArgumentParser:
    """The command's parser, built with the documented state directory in its defaults."""
    from kube_fault_proxy.cli.main import parser

    with _default_state_dir():
        return parser()


def commands(p: argparse.ArgumentParser, path: tuple[str, ...] = ("kube-fault-proxy",),
             help_text: str | None = None) -> Iterator[tuple[tuple[str, ...], str | None, argparse.ArgumentParser]]:
    """Every command and subcommand, depth first: its words, its one-line help and its parser."""
    yield path, help_text, p
    for action in p._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {a.dest: a.help for a in action._choices_actions}
            for name, sub in action.choices.items():
                yield from commands(sub, (*path, name), helps.get(name))


def options(p: argparse.ArgumentParser) -> Iterator[argparse.Action]:
    """The options and arguments a reader sets (not --help, --version or the subcommand's slot)."""
    for action in p._actions:
        if not isinstance(action, argparse._HelpAction | argparse._VersionAction | argparse._SubParsersAction):
            yield action


def _name(action: argparse.Action) -> str:
    if not action.option_strings:
        return code(action.metavar or action.dest)
    takes = action.nargs != 0
    metavar = action.metavar or (action.dest.upper() if takes else "")
    shown = ", ".join(action.option_strings)
    return code(f"{shown} {metavar}".strip() if takes else shown)


def _default(action: argparse.Action) -> str:
    value = action.default
    if action.required:
        return "**required**"
    if value is None or value is False or value == [] or value == argparse.SUPPRESS or action.nargs == 0:
        return ""
    if isinstance(value, Path):
        value = str(value)
    return code(value)


def _help(action: argparse.Action) -> str:
    words = (action.help or "") % {"default": action.default, "prog": ""} if action.help else ""
    if action.choices:
        words += (" — " if words else "") + "one of " + ", ".join(str(c) for c in action.choices)
    if action.nargs in ("+", "*") or isinstance(action, argparse._AppendAction):
        words += " (repeatable)" if action.option_strings else ""
    return text(words)


def undescribed(p: argparse.ArgumentParser) -> list[str]:
    """Every command and option with no help text, as `kube-fault-proxy serve --listen`."""
    missing = []
    for path, help_text, sub in commands(p):
        if len(path) > 1 and not help_text:
            missing.append(" ".join(path))
        missing += [f"{' '.join(path)} {a.option_strings[0] if a.option_strings else a.dest}"
                    for a in options(sub) if not a.help]
    return missing


def cli_page() -> str:
    """docs/reference/cli.md."""
    p = full_parser()
    sections = []
    leaves = [(path, h, sub) for path, h, sub in commands(p) if len(path) > 1]
    sections.append(table(("command", "what it does"),
                          [(f"[{code(' '.join(path[1:]))}](#{'-'.join(path)})", text(h or ""))
                           for path, h, _ in leaves]))
    for path, help_text, sub in leaves:
        rows = [(_name(a), _default(a), _help(a)) for a in options(sub)]
        usage = " ".join(path) + (" …" if rows else "")
        body = table(("option", "default", "description"), rows) if rows else "No options.\n"
        sections.append(f"## {' '.join(path)}\n\n{text(help_text or '')}\n\n```\n{usage}\n```\n\n{body}")
    return page("Command line", f"{text(p.description or '')} Every command exits 0 when all is well, 1 when a check "
                "failed (or the control plane is unreachable) and 2 on a usage or input error. "
                f"`{STATE_DIR_SHOWN}` stands for the state directory (`$KFP_STATE_DIR` overrides it).", sections)
