"""Memory tracing for a benchmarked proxy process (bench/memory_soak.py puts this directory on its PYTHONPATH).

With KFP_MEMTRACE_DIR set: tracemalloc runs from interpreter start (KFP_MEMTRACE_FRAMES frames, 0: off),
and each SIGUSR2 writes `dump-N.json` there (RSS, glibc's mallinfo2, Python's arenas, tracemalloc's total,
malloc_trim's effect when KFP_MEMTRACE_TRIM=1, counts of gc-tracked objects by type) and, when tracing,
`snap-N.pickle` (a tracemalloc snapshot). Without the variable it does nothing.
"""

from __future__ import annotations

import ctypes
import gc
import json
import os
import re
import signal
import sys
import tempfile
import time
import tracemalloc
from collections import Counter, deque
from pathlib import Path
from types import FrameType

_DIR = os.environ.get("KFP_MEMTRACE_DIR")
_count = 0


def _rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


class _Mallinfo2(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
                                               "fsmblks", "uordblks", "fordblks", "keepcost")]


def _malloc() -> dict[str, float]:
    """glibc's heap: bytes from the OS (arena: brk heap; hblkhd: mmapped), in use, and free in the heap."""
    libc = ctypes.CDLL("libc.so.6")
    libc.mallinfo2.restype = _Mallinfo2
    m = libc.mallinfo2()
    return {"heapMb": round(m.arena / 2**20, 1), "mmappedMb": round(m.hblkhd / 2**20, 1),
            "inUseMb": round(m.uordblks / 2**20, 1), "freeInHeapMb": round(m.fordblks / 2**20, 1)}


def _obmalloc() -> dict[str, float]:
    """Python's small-object allocator (sys._debugmallocstats, which writes to fd 2): arenas and blocks."""
    with tempfile.TemporaryFile() as f:
        saved = os.dup(2)
        try:
            os.dup2(f.fileno(), 2)
            sys._debugmallocstats()
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        f.seek(0)
        text = f.read().decode(errors="replace")
    out: dict[str, float] = {}
    for key, label in (("arenasAllocatedCurrent", "# arenas allocated current"),
                       ("arenasHighwater", "# arenas highwater mark"),
                       ("allocatedBlocksMb", "bytes in allocated blocks"),
                       ("availableBlocksMb", "bytes in available blocks"),
                       ("arenasMb", "Total")):
        m = re.search(re.escape(label) + r"\s*=\s*([\d,]+)", text)
        if m:
            v = int(m.group(1).replace(",", ""))
            out[key] = v if key.startswith("arenas") and not key.endswith("Mb") else round(v / 2**20, 1)
    return out


def _large(objects: list[object], least: int = 2000) -> list[dict[str, object]]:
    """Containers holding at least `least` items, with what holds them (type and attribute name)."""
    out: list[dict[str, object]] = []
    for o in objects:
        if isinstance(o, (dict, list, set, deque)) and len(o) >= least:
            holders = []
            for r in gc.get_referrers(o):
                owner = next((k for k, v in r.items() if v is o), None) if isinstance(r, dict) else None
                holders.append(f"{type(r).__module__}.{type(r).__qualname__}" + (f"[{owner!r}]" if owner else ""))
                for rr in gc.get_referrers(r) if isinstance(r, dict) else ():  # an instance's __dict__
                    if getattr(rr, "__dict__", None) is r:
                        holders.append(f"  owner {type(rr).__module__}.{type(rr).__qualname__}")
            out.append({"type": f"{type(o).__module__}.{type(o).__qualname__}", "len": len(o),
                        "holders": holders[:6]})
    return sorted(out, key=lambda x: -int(str(x["len"])))[:20]


def _big(objects: list[object], least: int = 256 * 1024) -> list[dict[str, object]]:
    """Objects of at least `least` bytes themselves (a dict's table, a buffer), tracked or not (an untracked
    dict of ints, bytes), found among gc-tracked objects and what they refer to, with a holder's type."""
    out: list[dict[str, object]] = []
    seen: set[int] = set()
    for o in objects:
        for x in (o, *gc.get_referents(o)):
            if id(x) in seen:
                continue
            try:
                size = sys.getsizeof(x)
                if size >= least:
                    seen.add(id(x))
                    out.append({"type": f"{type(x).__module__}.{type(x).__qualname__}", "bytes": size,
                                "len": len(x) if isinstance(x, (dict, list, set, bytes, bytearray)) else None,
                                "holder": f"{type(o).__module__}.{type(o).__qualname__}"})
            except Exception:
                continue
    return sorted(out, key=lambda x: -int(str(x["bytes"])))[:20]


def _dump(signum: int, frame: FrameType | None) -> None:
    """Never raises into the interrupted code: an error is written as the dump."""
    global _count
    assert _DIR is not None
    _count += 1
    try:
        _write_dump()
    except Exception as e:
        Path(f"{_DIR}/dump-{_count}.json").write_text(json.dumps({"n": _count, "error": repr(e)}))


def _write_dump() -> None:
    t0 = time.monotonic()
    gc.collect()
    out: dict[str, object] = {"n": _count, "rssMb": round(_rss_mb(), 1), "malloc": _malloc(),
                              "obmalloc": _obmalloc()}
    if tracemalloc.is_tracing():
        current, peak = tracemalloc.get_traced_memory()
        out |= {"tracedMb": round(current / 2**20, 1), "tracedPeakMb": round(peak / 2**20, 1),
                "tracemallocOwnMb": round(tracemalloc.get_tracemalloc_memory() / 2**20, 1)}
        tracemalloc.take_snapshot().dump(f"{_DIR}/snap-{_count}.pickle")
    objects = gc.get_objects()
    types = Counter(f"{type(o).__module__}.{type(o).__qualname__}" for o in objects)
    out["large"] = _large(objects)
    out["big"] = _big(objects)
    del objects
    out["gcObjects"] = sum(types.values())
    out["types"] = dict(types.most_common(60))
    if os.environ.get("KFP_MEMTRACE_TRIM") == "1":
        ctypes.CDLL("libc.so.6").malloc_trim(0)
        out["rssAfterTrimMb"] = round(_rss_mb(), 1)
        out["mallocAfterTrim"] = _malloc()
    out["seconds"] = round(time.monotonic() - t0, 2)
    Path(f"{_DIR}/dump-{_count}.json").write_text(json.dumps(out, indent=1))


if _DIR:
    frames = int(os.environ.get("KFP_MEMTRACE_FRAMES", "0"))
    if frames:
        tracemalloc.start(frames)
    signal.signal(signal.SIGUSR2, _dump)
