"""What the process keeps for every visitor, bounded in bytes: each entry's size measured, the least recently used
dropped first once a cache is over its budget.

A cache bounded by its number of entries is bounded in nothing a server runs out of: one entry of the heavy-work
gate is a 3 kB tokenization or a 30 MB decoding of a 58k-vocabulary model at its length cap, and a room typing new
sentences all day fills every entry. The budgets below are the one place that says how much each shared cache may
hold; :func:`nbytes` measures an entry, :class:`ByteLRU` keeps entries under a budget.

The budgets, in bytes (a visitor's own session state is not in them: Streamlit drops it when the visitor leaves):

* :data:`GATE_BYTES`: finished decodings, traces, beam searches, attribution readings and the rest of
  :mod:`serving.heavy`'s shared results. A slimmed decoding of a long sentence is well under 1 MB (its steps keep the
  top tokens, not vocabulary-wide rows), a trace of the longest input 24 MB, so 256 MiB holds a lecture's
  worth, while a room's worst case stays a known amount on a 2 GB worker. An operator may set :data:`WORK_BYTES` of
  it aside for the work in flight (:data:`serving.heavy.SET_ASIDE_ENV`).
* :data:`FIGURE_BYTES`: Plotly and Altair figures shared by :mod:`serving.figures` (a heatmap is tens of kB, the
  36-panel grid of a long sentence 2.6 MB) and, unless an operator turns it off, :data:`DRAWING_BYTES` of it set
  aside for the figures the pages are sending: 64 MiB.

The model itself (``st.cache_resource``, four checkpoints at most, ``ui.state.load``) and the small per-page
caches (``st.cache_data`` with a handful of entries) are bounded by count: their entries are few and of known size.

What work in flight uses is not in these budgets (unless the gate sets :data:`WORK_BYTES` aside), only kept small
where it was large: the gate runs one heavy computation at a time (at most :data:`WORK_BYTES`), and each session's
page run draws its figures (the Attention page's first run on a 128-piece sentence: 7–9 MB of Plotly JSON, ~50 MB
while it is drawn). A page that offers a download holds what the file is made from weakly
(:func:`app_pages.attention.views.made_from_trace_when_asked`): a session keeps nothing the budgets dropped.
"""

from __future__ import annotations

import ctypes
import gc
import os
import sys
import threading
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import fields, is_dataclass
from typing import Any, Hashable, Iterator

#: Bytes the heavy-work gate may use (:class:`serving.heavy.Gate`): its shared results and, unless an operator turns
#: it off, :data:`WORK_BYTES` set aside from them for the work in flight.
GATE_BYTES = 256 * 2**20
#: What the room's work in flight may use: the one heavy computation the gate runs and the pages being drawn beside
#: it. The computation, on the longest input, a 1,980-character sentence (128 pieces), measured as glibc's memory in
#: use above its start (``mallinfo2``, sampled every 2 ms): the attribution of its last step (127 pieces written)
#: 94-124 MB (:data:`reading.gradients.PASS_TOKENS`), that step's faithfulness 40 MB, its trace 52 MB, a batch of
#: sixteen such first decodings 78 MB. Measured again as the resident memory above the process's (every 1 ms, a
#: warm process): attribution 73 MB, faithfulness 66-74 MB, a batch of sixteen first decodings 98 MB; with the grid
#: of the attribution read in bounded passes, faithfulness in passes of 1,024 positions and first decodings batched
#: up to 1,024 source tokens (:data:`serving.batcher.MAX_BATCH_TOKENS`) 59, 32 and 48 MB, the trace 28 MB;
#: twenty visitors' page runs of such sentences beside it (their figures built
#: before they are shared) took the rest: with 128 MiB set aside a churned soak's resident memory reached 20-45 MB
#: above the bound at its peaks. The process's gate sets it aside from :data:`GATE_BYTES` (unless
#: ``ATTENTION_EXPLORER_GATE_SET_ASIDE=0``, :data:`serving.heavy.SET_ASIDE_ENV`), so that its results and the work in
#: flight together stay within the gate's budget. 30-minute churned soaks, bound 925-926 MB: without it, readings
#: 851-1,068 MB (high-water mark 1,149); with it, 804-929 (992), but the visitors' clicks waited in the gate's line
#: for what the 96 MiB of results had dropped (p95 12.7 s against 0.6 s), until the line served quick computations
#: first (:mod:`serving.line`): 816-911 MB (1,005), clicks p95 0.50 s. 176 MiB (results 80 MiB) kept the high-water
#: mark under the bound (919 against 926) but dropped what visitors stepped through: clicks p95 5.3 s; the figures
#: set :data:`DRAWING_BYTES` aside instead.
WORK_BYTES = 160 * 2**20
#: What the pages being drawn may use, set aside from :data:`FIGURE_BYTES` (unless the operator turns the set-asides
#: off, :data:`SET_ASIDE_ENV`), so that the figures kept and those being built and sent together stay within it. A
#: page run serialises each figure it shows (``plotly.io.to_json``, then Streamlit hashes the JSON and copies it into
#: its message): the 36-panel grid of a 128-piece sentence peaks at 17 MB while it is sent, and the highest peaks of
#: a churned soak were two pages drawing it beside an attribution. With the charts' weights in float32
#: (:data:`viz.attention.CHART_DTYPE`) and nothing set aside here, the high-water mark of a 30-minute churned soak was
#: 928 MB against a bound of 926. A figure dropped costs a page run 3-13 ms to build again (the grid of a 128-piece
#: sentence 13 ms, a heatmap 3 ms), in its own thread, where a gate result dropped waits in the gate's line. With
#: 32 MiB set aside: 898 MB, clicks p95 0.41 s.
DRAWING_BYTES = 32 * 2**20
#: Set to 0, the caches keep their whole budgets: :data:`WORK_BYTES` is not set aside from the gate's nor
#: :data:`DRAWING_BYTES` from the figures' (for a worker with memory to spare).
SET_ASIDE_ENV = "ATTENTION_EXPLORER_GATE_SET_ASIDE"
#: Bytes the shared figures (:mod:`serving.figures`) and the figures being drawn may use together.
FIGURE_BYTES = 64 * 2**20


def set_aside(amount: int, environ: Mapping[str, str] | None = None) -> int:
    """``amount`` bytes, or 0 where :data:`SET_ASIDE_ENV` is ``"0"`` in ``environ`` (``os.environ`` by default)."""
    environ = os.environ if environ is None else environ
    return 0 if environ.get(SET_ASIDE_ENV, "").strip() == "0" else amount


_ATOMS = (type(None), bool, int, float, complex, str, bytes, bytearray, range)


def nbytes(value: Any) -> int:
    """An estimate of the bytes ``value`` keeps alive: arrays and tensors by their buffers (a tensor by its whole
    storage, which a view keeps alive; each buffer counted once), containers, mappings, dataclasses and plain
    objects walked, each object counted once, plus ``sys.getsizeof`` of every Python object met (a non-ASCII
    str with the UTF-8 copy it keeps once sent).

    A Plotly figure is measured by its data and layout (not its validators, which every figure shares), a pandas
    frame by ``memory_usage(deep=True)``; a torch module counts 0 (a result that refers to the model does not keep
    it: ``ui.state.load`` does). Never raises: an object it cannot walk counts its ``sys.getsizeof``.
    """
    return _Walker().size(value)


class _Walker:
    def __init__(self) -> None:
        self.seen: set[int] = set()
        self.buffers: set[tuple[int, int]] = set()

    def size(self, value: Any) -> int:
        total = 0
        stack = [value]
        while stack:
            obj = stack.pop()
            if id(obj) in self.seen:
                continue
            self.seen.add(id(obj))
            total += self._own(obj, stack)
        return total

    def _own(self, obj: Any, stack: list) -> int:
        """``obj``'s own bytes; what it refers to is pushed on ``stack``."""
        if isinstance(obj, str):
            return _str_bytes(obj)
        if isinstance(obj, _ATOMS):
            return sys.getsizeof(obj)
        if hasattr(obj, "state_dict") and hasattr(obj, "parameters"):  # a model: the model cache owns it, not us
            return 0
        if hasattr(obj, "untyped_storage") and hasattr(obj, "element_size"):  # a torch tensor, torch not imported
            storage = obj.untyped_storage()
            return 64 + self._buffer(storage.data_ptr(), storage.nbytes())
        if type(obj).__module__ == "numpy" and hasattr(obj, "nbytes"):  # an ndarray or a NumPy scalar
            base = obj
            while getattr(base, "base", None) is not None and hasattr(base.base, "nbytes"):
                base = base.base
            ptr = base.__array_interface__["data"][0] if hasattr(base, "__array_interface__") else id(base)
            return 112 + self._buffer(ptr, int(base.nbytes))
        if hasattr(obj, "memory_usage") and hasattr(obj, "columns"):  # a pandas DataFrame
            return int(obj.memory_usage(deep=True).sum())
        if hasattr(obj, "_data") and hasattr(obj, "_layout") and hasattr(obj, "to_plotly_json"):  # a Plotly figure
            stack.extend((obj._data, obj._layout))
            return sys.getsizeof(obj)
        own = _sizeof(obj)
        if isinstance(obj, Mapping):
            for k, v in obj.items():
                stack.extend((k, v))
        elif isinstance(obj, (list, tuple, set, frozenset)):
            stack.extend(obj)
        elif is_dataclass(obj):
            stack.extend(getattr(obj, f.name, None) for f in fields(obj))
        elif hasattr(obj, "__dict__") and not isinstance(obj, type):
            stack.append(vars(obj))
        elif hasattr(obj, "__slots__"):
            stack.extend(getattr(obj, s, None) for s in obj.__slots__)
        return own

    def _buffer(self, ptr: int, size: int) -> int:
        if (ptr, size) in self.buffers:
            return 0
        self.buffers.add((ptr, size))
        return size


#: A compact non-ASCII str's own bytes besides its characters (``"é"``: this plus one byte and the terminator).
_STR_HEADER = sys.getsizeof("\u00e9") - 2


def _str_bytes(text: str) -> int:
    """A str's bytes including the UTF-8 copy CPython keeps beside a non-ASCII string once something reads it as
    UTF-8, which protobuf does when Streamlit sends it: counted before it is sent, a shared HTML grid measured two
    thirds of what it held once drawn."""
    size = sys.getsizeof(text)
    if text.isascii():  # its characters are its UTF-8: no copy
        return size
    widest = ord(max(text))
    kind = 1 if widest < 0x100 else 2 if widest < 0x10000 else 4
    bare = _STR_HEADER + (len(text) + 1) * kind
    return size if size > bare else bare + len(text.encode("utf-8", "surrogatepass")) + 1


def _sizeof(obj: Any) -> int:
    try:
        return sys.getsizeof(obj)
    except TypeError:
        return 64


class ByteLRU:
    """An LRU cache bounded by bytes: entries measured with :func:`nbytes` when put, the least recently used
    dropped until the total is within ``budget`` bytes. An entry larger than the whole budget is not kept.

    Not thread-safe: the caller holds its own lock (the gate's condition, the figures' lock).

    Args:
        budget: bytes all entries together may hold (≥ 0).
    """

    def __init__(self, budget: int):
        self.budget = max(0, int(budget))
        self._entries: OrderedDict[Hashable, tuple[Any, int]] = OrderedDict()
        self.total = 0  # bytes of the entries kept now
        self.evicted = 0  # entries dropped to stay within the budget so far

    def __contains__(self, key: Hashable) -> bool:
        return key in self._entries

    def __len__(self) -> int:
        return len(self._entries)

    def __iter__(self) -> Iterator[Hashable]:
        return iter(self._entries)

    def get(self, key: Hashable) -> Any:
        """The value of ``key``, now the most recently used.

        Raises:
            KeyError: ``key`` is not kept.
        """
        self._entries.move_to_end(key)
        return self._entries[key][0]

    def put(self, key: Hashable, value: Any, size: int | None = None) -> bool:
        """Keep ``value`` under ``key`` (``size``: its bytes when already known, else measured); drop the least
        recently used entries over the budget. Returns whether it was kept (False: larger than the budget)."""
        size = nbytes(value) if size is None else int(size)
        self.pop(key)
        if size > self.budget:
            return False
        self._entries[key] = (value, size)
        self.total += size
        while self.total > self.budget:
            _, (_, dropped) = self._entries.popitem(last=False)
            self.total -= dropped
            self.evicted += 1
        return True

    def pop(self, key: Hashable) -> None:
        """Forget ``key`` (nothing happens when it is not kept)."""
        if key in self._entries:
            self.total -= self._entries.pop(key)[1]

    def clear(self) -> None:
        """Forget every entry."""
        self._entries.clear()
        self.total = 0

    def size_of(self, key: Hashable) -> int:
        """The bytes counted for ``key``'s entry."""
        return self._entries[key][1]


#: Seconds between two :func:`tidy` calls of the thread :func:`keep_giving_back` starts. A full collection of 225,000
#: objects (about what a served process holds beyond its frozen model) took ~20 ms here, 0.4 % of a core at 5 s; at
#: 20 s a churned room's interrupted runs held their figures and arrays up to four times as long.
GIVE_BACK_S = 5.0
_giving_back = threading.Lock()
_thread: threading.Thread | None = None


def give_back() -> bool:
    """Hand the memory the C allocator keeps free back to the system (glibc's ``malloc_trim(0)``); returns whether
    it could (False off glibc).

    A server frees a session's pages, a dropped cache entry's tensors and a computation's temporaries, but glibc
    keeps freed memory in its arenas (one per thread that allocated, and Streamlit runs each script run in a thread
    of its own), so a process's resident memory stays at its highest: a soak with visitors coming and going kept
    1.1 GB after everyone had left, of which the caches held 127 MiB."""
    try:
        return bool(ctypes.CDLL(None).malloc_trim(0))
    except (OSError, AttributeError):
        return False


#: glibc's allocator settings for a server (``mallopt`` name, its number, the value, the variable that sets it at
#: start-up): large blocks (a step's vocabulary rows, an attribution pass's tensors, a figure's arrays) are mapped
#: on their own and unmapped when freed, and the heap's free top is handed back past 128 KiB. By default glibc
#: raises its mmap threshold to the size of each large block freed (up to 32 MiB), so after the first big tensor
#: every multi-MB block came from the heaps and left holes the trim cannot return: a churned room's heaps held
#: 90–370 MB free between trims, with 4 MB mapped. The price is compute: every mapped block is zeroed page by page
#: when first touched, and torch's mid-sized activations pay it (a step's attribution 0.60 -> 0.72 s, a small
#: training step 45 % slower). A threshold of 2–4 MiB costs nothing measurable but leaves the holes (a 4-minute
#: churned soak at 4 MiB: 294 MB free in the heaps, peak 246 MB over the bound); the server keeps memory. Two
#: arenas: Streamlit runs every script run in a thread of its own, and glibc gives threads arenas of their own (up to
#: 8 per core), each keeping what it freed (``make serve``'s workers had it from their environment,
#: :data:`deploy.worker.MALLOC_ARENAS`; ``make run`` and the benchmarks' servers had glibc's default).
ALLOCATOR = (
    ("M_MMAP_THRESHOLD", -3, 128 << 10, "MALLOC_MMAP_THRESHOLD_"),
    ("M_TRIM_THRESHOLD", -1, 128 << 10, "MALLOC_TRIM_THRESHOLD_"),
    ("M_ARENA_MAX", -8, 2, "MALLOC_ARENA_MAX"),
)


def tune_allocator(environ: Mapping[str, str] | None = None) -> list[str]:
    """Apply :data:`ALLOCATOR` with glibc's ``mallopt``, each setting unless its variable is in ``environ``
    (``os.environ`` by default: glibc read it at start-up, an operator's choice wins); returns the names set (empty
    off glibc).

    In the process rather than in the environment, so that ``make run``, ``make serve``'s workers, the container and
    the benchmarks' servers all run with it (a variable must be set before the process starts). Fixing the mmap
    threshold also turns off glibc's raising of it; blocks allocated before the call stay where they are."""
    environ = os.environ if environ is None else environ
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return []
    return [name for name, param, value, var in ALLOCATOR if var not in environ and mallopt(param, value) == 1]


def tidy() -> int:
    """Collect the process's cyclic garbage (``gc.collect()``), then :func:`give_back`; returns the objects
    collected.

    A page run that Streamlit interrupts or stops (a click during a run, ``st.stop``) ends in an exception whose
    traceback holds that run's frames, and so its figures, JSON and arrays, in reference cycles that only a full
    collection frees; the app turns off Streamlit's collection after every run (``runner.postScriptGC``: it cost a
    click most of its time), so without this they wait for Python's own rare full collections. In a churned soak
    a full collection every 15 s freed up to 48 MB."""
    collected = gc.collect()
    give_back()
    return collected


def keep_giving_back(every_s: float = GIVE_BACK_S) -> bool:
    """Once per process, :func:`tune_allocator`, then start a daemon thread that calls :func:`tidy` every
    ``every_s`` seconds (a full collection walks only what was made after the model's load, which ``ui.state.load``
    freezes, and a trim takes milliseconds). Returns whether the thread runs (False off glibc)."""
    global _thread
    with _giving_back:
        if _thread is None and give_back():
            tune_allocator()

            def loop() -> None:
                while True:
                    threading.Event().wait(every_s)
                    tidy()

            _thread = threading.Thread(target=loop, name="give-back-memory", daemon=True)
            _thread.start()
        return _thread is not None
