"""Where kube-fault-proxy keeps state on disk (CA, journal), overridable with KFP_STATE_DIR."""

from __future__ import annotations

import os
from pathlib import Path


def state_dir() -> Path:
    """$KFP_STATE_DIR, else ~/.local/state/kube-fault-proxy."""
    env = os.environ.get("KFP_STATE_DIR")
    return Path(env) if env else Path.home() / ".local" / "state" / "kube-fault-proxy"


def ca_dir() -> Path:
    """mitmproxy's confdir: the CA the proxy signs its serving certificates with."""
    return state_dir() / "ca"


def default_journal() -> Path:
    """The journal file when --journal is not given."""
    return state_dir() / "journal.jsonl"
