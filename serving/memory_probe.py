"""Where a served process's memory goes, written down every few seconds when an environment switch asks for it.

``ATTENTION_EXPLORER_MEMORY_PROBE=path`` makes a served app (``app.py`` calls :func:`start_if_asked`) append one
JSON line to ``path`` every :data:`EVERY_S` seconds: the resident memory (``/proc/self/status``), what glibc's
allocator has taken from the system and how much of it is in use or free (``mallinfo2``), Python's own small
object blocks, the shared caches' bytes as they count them (:mod:`serving.heavy`'s gate, :mod:`serving.figures`), the
sessions Streamlit holds and what each one's state and outgoing queue keep (:func:`serving.memory.nbytes`),
Streamlit's ``st.cache_*`` and media files. ``ATTENTION_EXPLORER_TRACEMALLOC=N`` also traces Python's
allocations (N frames each; slow) and adds the 15 source lines holding the most. Off by default: a soak reads it
(``python -m benchmarks.soak --churn --probe``), a server in production never pays for it.
"""

from __future__ import annotations

import ctypes
import json
import os
import sys
import threading
import time
from typing import Any

PROBE_ENV = "ATTENTION_EXPLORER_MEMORY_PROBE"
TRACE_ENV = "ATTENTION_EXPLORER_TRACEMALLOC"
#: Set: each line also runs a full garbage collection and says what it freed (whether cycles hold memory).
GC_ENV = "ATTENTION_EXPLORER_MEMORY_PROBE_GC"
#: Seconds between two lines.
EVERY_S = 10.0
_started = False
_lock = threading.Lock()


class _MallInfo2(ctypes.Structure):
    _fields_ = [
        (name, ctypes.c_size_t)
        for name in (
            "arena",
            "ordblks",
            "smblks",
            "hblks",
            "hblkhd",
            "usmblks",
            "fsmblks",
            "uordblks",
            "fordblks",
            "keepcost",
        )
    ]


def malloc_info() -> dict[str, int]:
    """glibc's ``mallinfo2`` over every arena, in bytes: ``heap`` (taken with brk/arenas), ``mmapped`` (large
    blocks mapped one by one), ``in_use`` and ``free`` (of ``heap``); empty off glibc 2.33+."""
    try:
        fn = ctypes.CDLL(None).mallinfo2
    except (OSError, AttributeError):
        return {}
    fn.restype = _MallInfo2
    m = fn()
    return {"heap": m.arena, "mmapped": m.hblkhd, "in_use": m.uordblks, "free": m.fordblks}


def process_memory() -> dict[str, int]:
    """``VmRSS``, ``RssAnon`` and ``RssFile`` of this process in bytes (empty off Linux)."""
    out: dict[str, int] = {}
    try:
        with open("/proc/self/status") as f:
            for line in f:
                key, _, rest = line.partition(":")
                if key in ("VmRSS", "RssAnon", "RssFile", "VmHWM"):
                    out[key] = int(rest.split()[0]) * 1024
    except OSError:
        pass
    return out


def _streamlit() -> dict[str, Any]:
    from streamlit.runtime import Runtime

    from serving.memory import nbytes

    if not Runtime.exists():
        return {}
    runtime = Runtime.instance()
    out: dict[str, Any] = {}
    sessions = []
    for info in runtime._session_mgr.list_sessions():
        app = info.session
        try:
            sessions.append((nbytes(app._session_state), nbytes(app._browser_queue)))
        except RuntimeError:  # a dict changed under the walk: this session is counted next time
            pass
    active = len(runtime._session_mgr.list_active_sessions())
    out["sessions"] = {
        "held": len(sessions),
        "active": active,
        "state_bytes": sum(s for s, _ in sessions),
        "queue_bytes": sum(q for _, q in sessions),
        "largest_state": max((s for s, _ in sessions), default=0),
    }
    families: dict[str, int] = {}
    for family, stats in runtime.stats_mgr.get_stats().items():
        families[family] = sum(getattr(s, "byte_length", 0) for s in stats)
    out["st_caches"] = families
    storage = getattr(runtime.media_file_mgr, "_storage", None)
    files = getattr(storage, "_files_by_id", {})
    out["media_bytes"] = sum(len(getattr(f, "content", b"")) for f in list(files.values()))
    return out


def sample(top: int = 15) -> dict[str, Any]:
    """One line of the probe (see the module)."""
    from serving import metrics

    line: dict[str, Any] = {
        "t": time.time(),
        **process_memory(),
        "malloc": malloc_info(),
        "py_blocks": sys.getallocatedblocks(),
        "threads": threading.active_count(),
    }
    line["caches"] = metrics.snapshot()
    try:
        line.update(_streamlit())
    except Exception as e:  # a diagnostic never takes the server down
        line["streamlit_error"] = repr(e)
    if os.environ.get(GC_ENV):
        import gc

        before, collected = malloc_info().get("in_use", 0), gc.collect()
        line["gc"] = {"collected": collected, "freed": before - malloc_info().get("in_use", 0)}
    import tracemalloc

    if tracemalloc.is_tracing():
        line["traced"], line["top"] = _traced(top)
    return line


def _traced(top: int) -> tuple[int, list]:
    """Bytes traced now, and the ``top`` places holding the most: each allocation is named by the innermost
    frame in this repository's code (not the virtual environment) and the innermost frame of all."""
    import tracemalloc

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    snap = tracemalloc.take_snapshot()
    total = 0
    places: dict[str, list[int]] = {}
    for stat in snap.statistics("traceback"):
        total += stat.size
        frames = list(stat.traceback)  # oldest first
        ours = next(
            (
                f
                for f in reversed(frames)
                if f.filename.startswith(root)
                and "/.venv/" not in f.filename
                and not f.filename.endswith("memory_probe.py")
            ),
            None,
        )
        where = f"{ours.filename[len(root) + 1 :]}:{ours.lineno}" if ours else "-"
        inner = frames[-1]
        key = f"{where} <- {os.path.basename(inner.filename)}:{inner.lineno}"
        place = places.setdefault(key, [0, 0])
        place[0] += stat.size
        place[1] += stat.count
    ranked = sorted(places.items(), key=lambda kv: -kv[1][0])[:top]
    return total, [(k, size, count) for k, (size, count) in ranked]


def start_if_asked() -> bool:
    """Start the probe's thread once per process when :data:`PROBE_ENV` names a file (and tracemalloc when
    :data:`TRACE_ENV` is a number of frames). Returns whether the probe runs."""
    global _started
    path = os.environ.get(PROBE_ENV)
    if not path:
        return False
    with _lock:
        if _started:
            return True
        _started = True
        frames = os.environ.get(TRACE_ENV, "")
        if frames.isdigit() and int(frames) > 0:
            import tracemalloc

            tracemalloc.start(int(frames))

        def loop() -> None:
            while True:
                try:
                    line = sample()
                except Exception as e:  # keep probing: one failed walk says nothing of the next
                    line = {"t": time.time(), "error": repr(e)}
                with open(path, "a") as f:
                    f.write(json.dumps(line) + "\n")
                time.sleep(EVERY_S)

        threading.Thread(target=loop, name="memory-probe", daemon=True).start()
    return True
