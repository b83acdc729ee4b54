"""Logging for `serve`: -v shows what the proxy does, never a credential it carries."""

from __future__ import annotations

import logging
import re

# Libraries that log header blocks at DEBUG (hpack: every header, raw or Huffman-coded, so a
# token cannot be masked there) are held at WARNING whatever the verbosity.
QUIET = ("hpack", "h2", "h11")
_SECRETS = [
    (re.compile(r"(?i)\b(bearer\s+)[^\s'\",;)\]}]+"), r"\1<redacted>"),
    (re.compile(r"(?i)\b(basic\s+)[A-Za-z0-9+/=]{6,}"), r"\1<redacted>"),
    (re.compile(r"(?i)(b?['\"]?(?:authorization|proxy-authorization|cookie|set-cookie)['\"]?\s*[:,=]\s*b?['\"]?)"
                r"[^'\"\r\n]+"), r"\1<redacted>"),
]


def redact(text: str) -> str:
    """Bearer and basic credentials, Authorization and cookie values masked."""
    for pattern, replacement in _SECRETS:
        text = pattern.sub(replacement, text)
    return text


class RedactingFormatter(logging.Formatter):
    """A formatter whose every line, traceback included, has passed through redact()."""

    def format(self, record: logging.LogRecord) -> str:
        return redact(super().format(record))


def configure(verbose: bool) -> None:
    """Root logging for serve: DEBUG with -v, else WARNING; secrets masked at any level."""
    handler = logging.StreamHandler()
    handler.setFormatter(RedactingFormatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.DEBUG if verbose else logging.WARNING)
    for name in QUIET:
        logging.getLogger(name).setLevel(logging.WARNING)
