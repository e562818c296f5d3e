"""Heavy work, bounded for a whole room: at most a few at a time per server process, each computed once, shared.

A lecture hall runs one app process for many visitors. A decoding of a new sentence, a beam search, an ablation
sweep or a BPE training run holds a core for a fraction of a second to seconds; fifty of them at once would
make every click of every visitor wait behind them, with nothing on screen saying why. So heavy work goes
through one :class:`Gate` per process:

* **bounded**: at most ``slots`` computations run at once (``$ATTENTION_EXPLORER_HEAVY_SLOTS``, default 1:
  torch already spreads one computation over the process's cores); the others wait in line, first come first
  served except that one known to be quick goes first (:mod:`serving.line`), and the visitor sees *"Busy: 2
  computations ahead of yours"* instead of a silent hang;
* **computed once**: a result is kept by its key (checkpoint version, sentence, settings) in a cache bounded in
  bytes (:data:`serving.memory.GATE_BYTES`, least recently used dropped first) and
  handed to every visitor who asks for it; a visitor who asks while another one's identical computation runs
  waits for that one instead of starting a second;
* **bounded in time**: a visitor who would wait longer than ``max_wait_s`` is told the server is too busy and
  to try again, never left hanging.
* **batched** where that pays: the first decodings of new sentences that arrive together are collected by
  :mod:`serving.batcher` and decoded in one pass, which takes one slot like any computation and leaves each decoding in
  this cache (:meth:`Gate.keep`).
* **ahead of time**, in the background: :meth:`Gate.prefetch` computes a value nobody waits for yet (the next
  step's attribution, :mod:`serving.prefetch`) through the same slots and cache, only while no visitor waits in line:
  a visitor's request always takes a free slot before it.

Results are shared by every session, so they must be immutable values (frozen records, tuples, strings).
:class:`Gate` is plain Python (tested without Streamlit); :func:`shared` is its Streamlit face.
"""

from __future__ import annotations

import itertools
import os
import threading
import time
from typing import Callable, Hashable, TypeVar

import streamlit as st

from serving import memory
from serving.line import Line
from serving.memory import GATE_BYTES, WORK_BYTES, ByteLRU, nbytes

T = TypeVar("T")
#: What :meth:`Gate.lookup` returns for a key whose value it does not hold.
MISSING = object()
SLOTS_ENV = "ATTENTION_EXPLORER_HEAVY_SLOTS"
#: How often a waiting visitor's message is refreshed (s).
POLL_S = 0.25


class TooBusy(RuntimeError):
    """A wait for a free slot, or for another visitor's identical computation, would exceed the gate's ``max_wait_s``;
    ``ahead`` computations were in front."""

    def __init__(self, what: str, ahead: int, waited_s: float):
        super().__init__(f"{what}: {ahead} computations still ahead after {waited_s:.0f} s")
        self.what, self.ahead, self.waited_s = what, ahead, waited_s


class Gate:
    """A bounded line for heavy computations (quick ones first: :class:`serving.line.Line`), with single flight and a
    shared result cache.

    Args:
        slots: computations allowed to run at once (≥ 1).
        budget: bytes the gate may use: its kept results (:func:`serving.memory.nbytes` of each; least recently
            used dropped first) and ``work`` for each slot (default :data:`serving.memory.GATE_BYTES`).
        work: bytes one computation in a slot may use while it runs, set aside from ``budget`` for each slot (the
            process's gate: :data:`serving.memory.WORK_BYTES`; 0: the results may use the whole budget).
        max_wait_s: longest wait for a slot, or for another visitor's identical computation, before
            :class:`TooBusy` (seconds).

    Thread-safe: Streamlit runs every session's script in a thread of its own.
    """

    def __init__(self, slots: int = 1, budget: int = GATE_BYTES, max_wait_s: float = 90.0, work: int = 0):
        self.slots = max(1, int(slots))
        self.max_wait_s = float(max_wait_s)
        self._cond = threading.Condition()
        # what the computations running in the slots may use comes out of the same budget: while one runs, the
        # results kept and its own memory together stay within ``budget``
        self._results = ByteLRU(max(0, int(budget) - self.slots * max(0, int(work))))
        self._running: dict[Hashable, bool] = {}  # keys being computed now
        self._line = Line()  # tickets waiting for a slot
        self._sharing = 0  # visitors waiting for another one's identical computation (outside the line)
        self._background: list[int] = []  # prefetches waiting for a slot that no visitor wants, in arrival order
        self._busy = 0  # slots in use
        self._tickets = itertools.count()
        self.computed = 0  # visitors' computations started (for tests and the load benchmark's sanity checks)
        self.prefetched = 0  # prefetches started (apart: a prefetch must not change what a visitor's run counts)

    # --- what a page asks ---------------------------------------------------------------------------------
    def run(
        self,
        key: Hashable,
        compute: Callable[[], T],
        what: str = "the computation",
        notify: Callable[[str | None], None] = lambda message: None,
        keep: bool = True,
    ) -> T:
        """``compute()``'s value for ``key``: from the cache, from another visitor's identical computation, or
        computed here once a slot is free. ``notify(message)`` is called with a line for the visitor while waiting
        (refreshed every :data:`POLL_S` s) and with ``None`` when the wait is over. ``keep=False``: the value is
        not cached (a timing that must be measured afresh), only bounded like the rest.

        ``notify`` and ``compute`` may raise anything, Streamlit's rerun and stop exceptions included (a visitor's
        click interrupts their script run inside them): whatever this call holds, a place in line, a shared wait
        or a slot, is given back on every way out, so an interrupted visitor never wedges the gate for the others.

        Raises:
            TooBusy: no slot, or no shared result, within ``max_wait_s`` of the call.
            whatever ``notify`` or ``compute`` raises (nothing is cached then; a visitor waiting on it computes it
            itself).
        """
        value, computed_here = self._take_turn(key, what, notify)
        if not computed_here:
            notify(None)  # holds nothing now: an interruption here costs nobody a slot
            return value  # type: ignore[return-value]
        return self._compute(key, compute, notify, keep)

    def prefetch(self, key: Hashable, compute: Callable[[], object], what: str = "a prefetch") -> bool:
        """Compute ``key``'s value ahead of any visitor's request and keep it, at the lowest priority: a slot is
        taken only while no visitor waits in line for one (a visitor who arrives meanwhile goes first; one already
        computing is never interrupted). Nothing is done when the value is kept or being computed already.
        A visitor who asks for ``key`` while it is prefetched waits for that computation, as for another visitor's.

        Returns whether ``compute`` ran here. Whatever it raises is raised (nothing is kept); the slot is given
        back on every way out.

        Raises:
            TooBusy: no slot free of visitors within ``max_wait_s`` (the prefetch is dropped).
        """
        if not self._take_background_turn(key, what):
            return False
        self._compute(key, compute, lambda message: None, True)
        return True

    def _compute(self, key: Hashable, compute: Callable[[], T], notify: Callable[[str | None], None], keep: bool) -> T:
        """``compute()`` in the slot :meth:`_take_turn` or :meth:`_take_background_turn` took for ``key``."""
        done, size, value = False, 0, None
        try:  # the slot is ours from the line's last lock: only this finally gives it back
            notify(None)
            start = time.monotonic()
            value = compute()
            took = time.monotonic() - start
            size = nbytes(value) if keep else 0  # measured outside the lock, which every session's run takes
            done = True
        finally:
            with self._cond:
                self._busy -= 1
                del self._running[key]
                if done:
                    self._line.took(key, took)
                    if keep:
                        self._results.put(key, value, size)
                self._cond.notify_all()
        return value

    def _take_background_turn(self, key: Hashable, what: str) -> bool:
        """Wait for a slot no visitor is waiting for: ``True`` with it taken and ``key`` marked running (the caller
        must give both back), ``False`` when ``key`` is kept or being computed meanwhile (nothing to do)."""
        start = time.monotonic()
        ticket = None
        try:
            with self._cond:
                while True:
                    if key in self._results or key in self._running:
                        return False
                    if ticket is None:
                        ticket = next(self._tickets)
                        self._background.append(ticket)
                    if self._busy < self.slots and not self._line and self._background[0] == ticket:
                        self._background.remove(ticket)
                        ticket = None
                        self._busy += 1
                        self._running[key] = True
                        self.prefetched += 1
                        return True
                    waited = time.monotonic() - start
                    if waited > self.max_wait_s:
                        raise TooBusy(what, len(self._line) + self._busy, waited)
                    self._cond.wait(POLL_S)
        finally:  # computing, dropped or too busy: the place among the prefetches is given back
            if ticket is not None:
                with self._cond:
                    self._background.remove(ticket)
                    self._cond.notify_all()

    def _take_turn(self, key: Hashable, what: str, notify: Callable[[str | None], None]) -> tuple[object, bool]:
        """Wait for ``key``'s value or a slot: ``(value, False)`` from the cache or a shared computation, or
        ``(None, True)`` with a slot taken and ``key`` marked running (the caller must give both back)."""
        start = time.monotonic()
        ticket = None
        sharing = False
        try:
            while True:
                with self._cond:
                    if key in self._results:
                        return self._results.get(key), False
                    waited = time.monotonic() - start
                    if key in self._running:  # single flight: wait for that visitor's computation
                        if ticket is not None:  # out of the line meanwhile: a place held here would block others
                            self._line.leave(ticket)
                            ticket = None
                            self._cond.notify_all()
                        if not sharing:
                            sharing = True
                            self._sharing += 1
                        if waited > self.max_wait_s:
                            raise TooBusy(what, 1, waited)
                        message = f"Another visitor's request for {what} is being computed; it will be shared."
                    else:
                        if sharing:  # that computation failed or was not kept: compute it here
                            sharing = False
                            self._sharing -= 1
                        if ticket is None:
                            ticket = self._line.join(key)
                        if self._busy < self.slots and self._line.first() == ticket:
                            self._line.leave(ticket)
                            ticket = None
                            self._busy += 1
                            self._running[key] = True
                            self.computed += 1
                            return None, True
                        ahead = self._line.ahead_of(ticket) + self._busy
                        if waited > self.max_wait_s:
                            raise TooBusy(what, ahead, waited)
                        message = (
                            f"Busy: {ahead} heavy computation{'s' if ahead != 1 else ''} ahead of yours "
                            f"({what}). It starts as soon as one is done."
                        )
                    self._cond.wait(POLL_S)
                notify(message)  # outside the lock: a page's script run may be interrupted right here
        finally:  # served, too busy, or the visitor's script run was interrupted: leave the line and the wait
            if ticket is not None or sharing:
                with self._cond:
                    if ticket is not None:
                        self._line.leave(ticket)
                    if sharing:
                        self._sharing -= 1
                    self._cond.notify_all()

    # --- what the load benchmark and tests read -----------------------------------------------------------
    def waiting(self) -> int:
        """Computations waiting for a slot now."""
        with self._cond:
            return len(self._line)

    def sharing(self) -> int:
        """Visitors waiting now for another visitor's identical computation."""
        with self._cond:
            return self._sharing

    def cached(self, key: Hashable) -> bool:
        """Whether ``key``'s value is in the cache."""
        with self._cond:
            return key in self._results

    # --- what a batcher (serving.batcher) computes outside run() -----------------------------------------------
    def lookup(self, key: Hashable) -> object:
        """``key``'s cached value (now the most recently used), or :data:`MISSING`."""
        with self._cond:
            return self._results.get(key) if key in self._results else MISSING

    def keep(self, key: Hashable, value: object) -> None:
        """Cache ``value`` for ``key`` as :meth:`run` would have (a value computed in a batch of many keys)."""
        size = nbytes(value)  # measured outside the lock, which every session's run takes
        with self._cond:
            self._results.put(key, value, size)

    def stats(self) -> dict[str, int]:
        """Where the gate stands now: ``slots``, ``busy`` (slots in use), ``running`` (keys being computed),
        ``waiting`` (in line for a slot), ``sharing`` (waiting for another visitor's identical computation),
        ``computed`` (visitors' computations started so far), ``background`` (prefetches waiting for a slot),
        ``prefetched`` (prefetches started so far), ``entries`` and ``bytes`` kept, ``budget`` (bytes),
        ``evicted`` (entries dropped to stay within it). With no visitor left, ``busy``, ``running``, ``waiting``
        and ``sharing`` are 0 once the last prefetch is done: anything else is a wedged slot."""
        with self._cond:
            return {
                "slots": self.slots,
                "busy": self._busy,
                "running": len(self._running),
                "waiting": len(self._line),
                "sharing": self._sharing,
                "computed": self.computed,
                "background": len(self._background),
                "prefetched": self.prefetched,
                "entries": len(self._results),
                "bytes": self._results.total,
                "budget": self._results.budget,
                "evicted": self._results.evicted,
            }


def _positive_env(name: str, default: int) -> int:
    try:
        return max(1, int(os.environ.get(name, default)))
    except ValueError:
        return default


def _slots_from_env() -> int:
    return _positive_env(SLOTS_ENV, 1)


#: torch's intra-op threads in a server process (``$ATTENTION_EXPLORER_TORCH_THREADS``, default 1).
THREADS_ENV = "ATTENTION_EXPLORER_TORCH_THREADS"


def configure_torch() -> int:
    """Give torch :data:`THREADS_ENV` intra-op threads (default 1) in this server process, once; returns the number.

    One thread per computation: a server's cores are shared by every visitor's script runs (and by the other
    workers of ``make serve``), and torch's threads wait for each other at every operation. Measured on this 2-core
    machine while another process kept the cores busy: ten visitors arriving within 5 s, each with a sentence of
    their own, waited 16.6 s (p95) for the first page with torch's default 2 threads, 0.23 s with 1
    (``python -m benchmarks.load --scenario demo --levels 1,10``). More capacity comes from more slots or workers.
    """
    import torch

    threads = _positive_env(THREADS_ENV, 1)
    if torch.get_num_threads() != threads:
        torch.set_num_threads(threads)
    return threads


#: Unless set to 0, the process's gate sets :data:`serving.memory.WORK_BYTES` aside from its budget for the work in
#: flight, so that a churned room stays near its memory bound; what the smaller results drop is computed again, and
#: the line serves such quick re-computations first (see :data:`~serving.memory.WORK_BYTES`). The shared figures
#: follow the same switch (:data:`serving.memory.DRAWING_BYTES`).
SET_ASIDE_ENV = memory.SET_ASIDE_ENV


def _work_from_env() -> int:
    return memory.set_aside(WORK_BYTES)


#: The process's one gate, shared by every session.
GATE = Gate(_slots_from_env(), work=_work_from_env())


def notifier() -> Callable[[str | None], None]:
    """``notify(message)`` for a waiting visitor: the message in a placeholder of the page (drawn at the first
    message, emptied by ``None``; nothing is drawn when the value is ready at once)."""
    box = None

    def notify(message: str | None) -> None:
        nonlocal box
        if message is None:
            if box is not None:
                box.empty()
            return
        if box is None:
            box = st.empty()
        box.info(message, icon=":material/hourglass_top:")

    return notify


def too_busy(exc: TooBusy) -> None:
    """Tell the visitor the server is too busy for ``exc.what`` and stop the script run there (``st.stop``)."""
    st.warning(
        f"The server is too busy to compute {exc.what} right now: {exc.ahead} other "
        f"computation{'s were' if exc.ahead != 1 else ' was'} still ahead of yours after "
        f"{exc.waited_s:.0f} s. Please try again in a minute."
    )
    st.stop()


def shared(key: Hashable, compute: Callable[[], T], what: str, gate: Gate | None = None, keep: bool = True) -> T:
    """:meth:`Gate.run` in a page: while the visitor waits, a line in the page says how many computations are
    ahead (an empty placeholder otherwise: nothing is drawn when the value is ready). When the server is too busy,
    a warning says so and the script run stops there (``st.stop``): the rest of the page is not drawn half-way.

    Outside a script run (a download button's data, made in Streamlit's own thread when the visitor asks for the
    file) nothing is written while it waits, and :class:`TooBusy` is raised to the caller."""
    from streamlit.runtime.scriptrunner_utils.script_run_context import get_script_run_ctx

    if get_script_run_ctx(suppress_warning=True) is None:  # a download made on click: no page to write in
        return (gate or GATE).run(key, compute, what, lambda _message: None, keep)
    notify = notifier()
    try:
        return (gate or GATE).run(key, compute, what, notify, keep)
    except TooBusy as exc:
        notify(None)
        too_busy(exc)
        raise  # st.stop raises; this line is for type checkers
