"""Prefetch: heavy work a visitor will ask for next, computed in the background before they ask.

In a lecture hall a hundred visitors step through the lecturer's sentence with a heavy view open (attention vs
attribution: about 0.7 s of integrated gradients per step on a quiet machine). Computed when the first visitor
opens a step, everyone who reaches that step meanwhile waits for it: Next p95 2.71 s at 100 visitors. So when a
step is served, the steps after it are asked for here, and a :class:`Prefetcher` computes them through the gate
for heavy work (:meth:`serving.heavy.Gate.prefetch`: the same slots and shared cache) while no visitor waits for a slot,
so that a Next finds its step ready, or in flight and shared.

* **bounded**: at most ``cap`` jobs wait (``$ATTENTION_EXPLORER_PREFETCH``, default :data:`CAP`; 0 turns prefetch
  off); a new job beyond it drops the oldest waiting one. One worker thread computes one job at a time, so a
  prefetch holds at most one of the gate's slots, and only one no visitor was waiting for;
* **newest first**: the last step served is where the visitors are, so the newest job runs first; a job asked for
  again moves to the front instead of waiting twice; a job older than ``max_age_s`` is dropped unrun;
* **lowest priority**: a visitor's own request takes a free slot before any prefetch (a prefetch already computing
  finishes first: torch cannot be interrupted halfway);
* **never in the way**: whatever a task raises is logged and ends that job only; the gate gives its slot back on
  every way out (:meth:`serving.heavy.Gate.prefetch`); a job whose visitor's session has ended (``alive()`` false) stops
  before its next task; the worker is a daemon thread, and when the server process exits, :meth:`Prefetcher.close`
  drops what waits and lets the task in flight end first (torch computing in a thread while the interpreter shuts
  down aborts the process).

A job is a few tasks run in order (a step's attribution, then its faithfulness, then the next step's…), each one
computation through the gate, so that a session's end or the server's stops a job between two of them.

:class:`Prefetcher` is plain Python, tested with threads; :data:`PREFETCH` is the process's one, on
:data:`serving.heavy.GATE` as it is when a job is asked for.
"""

from __future__ import annotations

import atexit
import logging
import os
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Hashable, Sequence

from serving import heavy
from serving.heavy import Gate

log = logging.getLogger(__name__)
#: Jobs that may wait at once: a few visitors' next steps (a job is a few steps of one sentence).
CAP = 8
CAP_ENV = "ATTENTION_EXPLORER_PREFETCH"
#: Seconds a job may wait before it is dropped unrun: by then its visitors have moved on or asked for it themselves.
MAX_AGE_S = 30.0
#: Seconds the server's exit waits for the task in flight (one computation).
CLOSE_S = 10.0


@dataclass(eq=False)
class _Job:
    key: Hashable
    tasks: Sequence[Callable[[Gate], None]]
    gate: Gate
    alive: Callable[[], bool]
    asked: float


@dataclass
class Prefetcher:
    """Background jobs on a gate, bounded, newest first (see the module's docstring).

    Args:
        cap: jobs that may wait at once (0: :meth:`ask` does nothing).
        max_age_s: seconds a job may wait before it is dropped unrun.
    """

    cap: int = CAP
    max_age_s: float = MAX_AGE_S
    done: int = 0  # jobs run to their end (for tests and the load benchmark)
    failed: int = 0  # jobs that raised
    dropped: int = 0  # jobs dropped before their end: beyond the cap, too old, their session or the server ended
    closed: bool = False
    _cond: threading.Condition = field(default_factory=threading.Condition, repr=False)
    _queue: list = field(default_factory=list, repr=False)  # waiting jobs, oldest first
    _current: Hashable = field(default=None, repr=False)  # the key of the job running now
    _worker: threading.Thread | None = field(default=None, repr=False)

    @classmethod
    def from_env(cls) -> "Prefetcher":
        """A prefetcher whose cap is :data:`CAP_ENV` (else :data:`CAP`; ``0`` turns prefetch off)."""
        try:
            cap = max(0, int(os.environ.get(CAP_ENV, CAP)))
        except ValueError:
            cap = CAP
        return cls(cap)

    def ask(
        self,
        key: Hashable,
        tasks: Sequence[Callable[[Gate], None]],
        gate: Gate | None = None,
        alive: Callable[[], bool] = lambda: True,
    ) -> bool:
        """Queue a job under ``key`` (one job per key: asked again, it moves to the front) that calls each
        ``task(gate)`` in order in the background, ``gate`` being :data:`serving.heavy.GATE` when ``None``. A task
        should compute through :meth:`Gate.prefetch`; ``alive()`` is asked before each (false: the job ends there).
        Returns whether the job is queued (``False``: prefetch is off or closed, or the same key is running now)."""
        if self.cap <= 0:
            return False
        with self._cond:
            if key == self._current or self.closed:
                return False
            for queued in self._queue:
                if queued.key == key:
                    self._queue.remove(queued)
                    break
            self._queue.append(_Job(key, tuple(tasks), gate or heavy.GATE, alive, time.monotonic()))
            while len(self._queue) > self.cap:
                self._queue.pop(0)
                self.dropped += 1
            if self._worker is None or not self._worker.is_alive():
                self._worker = threading.Thread(target=self._work, name="prefetch", daemon=True)
                self._worker.start()
            self._cond.notify_all()
        return True

    def waiting(self) -> int:
        """Jobs queued now (not the one running)."""
        with self._cond:
            return len(self._queue)

    def running(self) -> bool:
        """Whether a job is running now."""
        with self._cond:
            return self._current is not None

    def idle(self) -> bool:
        """Nothing queued and nothing running."""
        with self._cond:
            return not self._queue and self._current is None

    def close(self, timeout_s: float = CLOSE_S) -> bool:
        """Take no more jobs, drop the waiting ones and wait up to ``timeout_s`` for the task in flight to end (the
        job stops after it). Returns whether nothing runs any more. Called when the process exits."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            self.closed = True
            self.dropped += len(self._queue)
            self._queue.clear()
            while self._current is not None and time.monotonic() < deadline:
                self._cond.wait(max(0.0, deadline - time.monotonic()))
            return self._current is None

    def _take(self) -> _Job:
        """The newest job still worth running (under the lock; waits for one)."""
        while True:
            while not self._queue:
                self._cond.wait()
            item = self._queue.pop()
            if time.monotonic() - item.asked > self.max_age_s:
                self.dropped += 1 + len(self._queue)  # the older ones are older still
                self._queue.clear()
                continue
            self._current = item.key
            return item

    def _work(self) -> None:
        while True:
            with self._cond:
                item = self._take()
            ran = failed = False
            try:
                for task in item.tasks:
                    if self.closed or not item.alive():
                        break
                    task(item.gate)
                else:
                    ran = True
            except heavy.TooBusy:  # the visitors kept every slot: the prefetch gives way, as it should
                pass
            except Exception:  # a prefetch is only ever a guess: its failure is the visitor's to meet, if at all
                failed = True
                log.exception("prefetch %r failed", item.key)
            finally:
                with self._cond:
                    self._current = None
                    self.done += ran
                    self.failed += failed
                    self.dropped += not (ran or failed)
                    self._cond.notify_all()


def session_alive() -> Callable[[], bool]:
    """``alive()`` for a job asked in this script run: whether this visitor's browser session is still open (always
    true outside a served app, e.g. in an ``AppTest``). Safe to call from the worker thread."""
    from streamlit.runtime import Runtime
    from streamlit.runtime.scriptrunner_utils.script_run_context import get_script_run_ctx

    ctx = get_script_run_ctx(suppress_warning=True)
    if ctx is None or not Runtime.exists():
        return lambda: True
    runtime, session = Runtime.instance(), ctx.session_id
    return lambda: runtime.is_active_session(session)


#: The process's prefetcher (its jobs compute on the gate in use when they are asked for).
PREFETCH = Prefetcher.from_env()
atexit.register(PREFETCH.close)
