"""Where a served process's memory goes, written down every few seconds when an environment switch asks for it.

``ATTENTION_EXPLORER_MEMORY_PROBE=path`` makes a served app (``app.py`` calls :func:`start_if_asked`) append one
JSON line to ``path`` every :data:`EVERY_S` seconds: the resident memory (``/proc/self/status``), what glibc's
allocator has taken from the system and how much of it is in use or free (``mallinfo2``), Python's own small
object blocks, the shared caches' bytes as they count them (:mod:`serving.heavy`'s gate, :mod:`serving.figures`), the
sessions Streamlit holds and what each one's state and outgoing queue keep (:func:`serving.memory.nbytes`),
Streamlit's ``st.cache_*`` and media files. ``ATTENTION_EXPLORER_TRACEMALLOC=N`` also traces Python's
allocations (N frames each; slow) and adds the 15 source lines holding the most. ``ATTENTION_EXPLORER_MEMORY_PEAKS=1``
also reads the resident memory every :data:`PEAK_EVERY_S` seconds and, each time it passes its highest reading by
:data:`PEAK_STEP` bytes, writes a ``peak`` line naming what every thread runs then (a spike between two 10-second
lines is otherwise seen only in ``VmHWM``, never explained). Off by default: a soak reads it
(``python -m benchmarks.soak --churn --probe``), a server in production never pays for it.
"""

from __future__ import annotations

import ctypes
import json
import os
import sys
import threading
import time
from types import FrameType
from typing import Any

PROBE_ENV = "ATTENTION_EXPLORER_MEMORY_PROBE"
TRACE_ENV = "ATTENTION_EXPLORER_TRACEMALLOC"
#: Set: each line also runs a full garbage collection and says what it freed (whether cycles hold memory).
GC_ENV = "ATTENTION_EXPLORER_MEMORY_PROBE_GC"
#: Set: also watch for new highs of the resident memory and say what runs at each (:func:`_watch_peaks`).
PEAKS_ENV = "ATTENTION_EXPLORER_MEMORY_PEAKS"
#: Seconds between two lines.
EVERY_S = 10.0
#: Seconds between two readings of the peak watcher, and how far (bytes) a reading must pass the highest so far.
PEAK_EVERY_S = 0.2
PEAK_STEP = 4 * 2**20
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


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def stacks(depth: int = 8) -> dict[str, list[str]]:
    """What every other thread runs now: up to ``depth`` innermost frames of this repository's code
    (``path:line function``), then the innermost frame of all, keyed by thread name and id."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    names = {t.ident: t.name for t in threading.enumerate()}
    out: dict[str, list[str]] = {}
    for ident, frame in sys._current_frames().items():
        if ident == threading.get_ident():
            continue
        ours: list[str] = []
        inner = f"{os.path.basename(frame.f_code.co_filename)}:{frame.f_lineno} {frame.f_code.co_name}"
        f: FrameType | None = frame
        while f is not None and len(ours) < depth:
            name = f.f_code.co_filename
            if name.startswith(root) and "/.venv/" not in name:
                ours.append(f"{name[len(root) + 1 :]}:{f.f_lineno} {f.f_code.co_name}")
            f = f.f_back
        if ours:
            out[f"{names.get(ident, '?')}-{ident % 10000}"] = ours + [inner]
    return out


def _watch_peaks(path: str, stop: threading.Event | None = None) -> None:
    """Append a ``peak`` line to ``path`` at each new high of the resident memory (by :data:`PEAK_STEP`), read every
    :data:`PEAK_EVERY_S` seconds, until ``stop`` is set (never, for a served process)."""
    highest = 0
    while stop is None or not stop.is_set():
        try:
            rss = _rss()
            if rss >= highest + PEAK_STEP:
                highest = rss
                line = {"t": time.time(), "peak": rss, "malloc": malloc_info(), "stacks": stacks()}
                from serving import metrics

                line["caches"] = metrics.snapshot()
                with open(path, "a") as f:
                    f.write(json.dumps(line) + "\n")
        except Exception as e:  # a diagnostic never takes the server down
            with open(path, "a") as f:
                f.write(json.dumps({"t": time.time(), "error": repr(e)}) + "\n")
        time.sleep(PEAK_EVERY_S)


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
        if os.environ.get(PEAKS_ENV):
            threading.Thread(target=_watch_peaks, args=(path,), name="memory-peaks", daemon=True).start()
    return True
