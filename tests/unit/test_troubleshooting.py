"""The troubleshooting page quotes this project's error messages as the code writes them.

Each message the page shows from kube-fault-proxy or a project script must still be in the source: its longest
run of four or more words without an example value (a number, a path, a quoted name) is looked up in the
package and scripts.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
OURS = re.compile(r"^(kube-fault-proxy[\w ]*|container-setup): ")
EXAMPLE = re.compile(r"'[^']*'|\S*[\d/…]\S*")  # a quoted name, a number, a path, an ellipsis
JOINED = re.compile(r"\"\s*\n\s*f?\"")  # a message split over two string literals, one line each


def messages(page: str) -> list[str]:
    """The lines in the page's fenced blocks that one of our commands prints, without the command's prefix."""
    blocks = re.findall(r"^```[^\n]*\n(.*?)^```", page, re.M | re.S)
    return [OURS.sub("", line) for block in blocks for line in block.splitlines() if OURS.match(line)]


def fragment(message: str) -> str:
    """The longest run of the message's words that holds no example value."""
    runs = [part.strip() for run in EXAMPLE.sub("\0", message).split("\0") for part in run.split(": ")]
    return max(runs, key=len, default="")


def _source() -> str:
    files = [*(ROOT / "proxy" / "kube_fault_proxy").rglob("*.py"), *(ROOT / "scripts").iterdir()]
    return JOINED.sub("", "\n".join(f.read_text(errors="replace") for f in files if f.is_file()))


def test_fragments_leave_example_values_out() -> None:
    assert fragment("could not listen on 127.0.0.1:7443 (in use?)") == "could not listen on"
    assert fragment("port 9080 is in use: YuniKorn's REST port is fixed") == "YuniKorn's REST port is fixed"
    assert fragment("--profile: no profile named 'bind-fail' in /x/fault_profiles") == "no profile named"


def test_the_page_quotes_messages_the_code_still_writes() -> None:
    found = messages((ROOT / "docs" / "troubleshooting.md").read_text())
    assert len(found) >= 10
    source = _source()
    stale = [m for m in found if len(fragment(m).split()) >= 4 and fragment(m) not in source]  # 3 words: too short to tell
    assert stale == []
    assert fragment("no such message in the code at all") not in source
