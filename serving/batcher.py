"""Dynamic batching: requests of one kind that arrive together are computed together, in one batched call.

When a lecturer says "open this link and type your own sentence", a hundred visitors ask within seconds for the
first decoding of a hundred different sentences. Decoded one after another (the gate for heavy work,
:mod:`serving.heavy`, runs one at a time) the last of them waits for all the others; a batched decoding reads the
model's weights once per token for all its sentences and costs a fraction of the sum of its parts. So, as serving
engines do, a :class:`Batcher` collects the requests that arrive while one batch is computed, and computes them
together next:

* **the window** (``window_ms``, default :data:`WINDOW_MS`, ``$ATTENTION_EXPLORER_BATCH_WINDOW_MS``): a batch is
  taken when its oldest request has waited this long, or sooner once ``max_batch`` requests wait. A lone visitor on
  a quiet server pays the window once; requests that arrived while a batch was computed have waited longer than
  it and go into the next batch at once;
* **the size** (``max_batch``, default :data:`MAX_BATCH`, ``$ATTENTION_EXPLORER_BATCH_MAX``): at most this many
  requests per batch, the oldest first; only requests of one ``group`` (one model) are batched together; and, where
  requests differ in cost, at most ``max_weight`` of their ``weight`` (the first decodings: :data:`MAX_BATCH_TOKENS`
  source tokens), though never fewer than one request;
* **one worker thread** per batcher (a daemon, started by the first request, started again should it ever end)
  takes the batches and calls ``compute_batch(items) -> values`` (one value per item, in order) inside ``run``
  (the gate's slot, so a batch counts as one heavy computation among the others). It is not a visitor's script
  run, so no visitor's click can interrupt a batch;
* **once**: a key waiting or being computed is joined, never computed twice; each value goes to ``deliver(key,
  value)`` (the gate's shared cache) before its waiters wake, and a request first asks ``lookup(key)``.

What every waiter gets, whatever happens:

* its own value (values are routed by key, never by position in a queue);
* or, when ``compute_batch`` raises or returns the wrong number of values, :class:`BatchFailed` naming the error
  (the cause chained); when ``run`` raises :class:`~serving.heavy.TooBusy` (no slot in time), a ``TooBusy`` of its own.
  The worker lives on for the next batch; nothing is cached, so a visitor's next click asks again;
* or, after ``max_wait_s`` (default 90 s) without its value, :class:`~serving.heavy.TooBusy`: no wait is unbounded.

A waiter is told where it stands through ``notify(message)``, every :data:`~serving.heavy.POLL_S` s, and
``notify(None)`` when its value is there. Whatever ``notify`` raises (Streamlit's rerun and stop exceptions: a click
interrupts a script run in it) ends that one wait and nothing else: the request stays in its batch, is computed and
delivered to the cache (where the interrupted visitor's next run finds it) and to the other waiters.

:class:`Batcher` is plain Python, tested with threads; :func:`batched` is its Streamlit face;
:data:`FIRST_DECODES` batches the first decodings of new sentences (:func:`ui.state.greedy_run`).
"""

from __future__ import annotations

import functools
import logging
import os
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Generic, Hashable, Sequence, TypeVar

import streamlit as st

from decoding.decoded import Decoding
from decoding.decoded_batch import checkpoint_decodings
from model.checkpoint import Checkpoint
from serving import heavy
from serving.heavy import MISSING, POLL_S, TooBusy

log = logging.getLogger(__name__)
# named for what they stand for (a lone ``I`` reads like ``1`` and ``l``)
ItemT = TypeVar("ItemT")
ValueT = TypeVar("ValueT")
#: Default collection window (ms) and batch size: sixteen sentences decode in about a fifth of what sixteen solo
#: decodings cost on this 2-core machine; more gain little and make every visitor of the batch wait for its longest.
WINDOW_MS, MAX_BATCH = 20.0, 16
WINDOW_ENV, MAX_BATCH_ENV = "ATTENTION_EXPLORER_BATCH_WINDOW_MS", "ATTENTION_EXPLORER_BATCH_MAX"
#: Source tokens one batch of first decodings holds at most: what a batch uses while it runs grows with them. Sixteen
#: sentences at the input cap (128 pieces each) took 98 MB above the process's memory while they were decoded (6.9 s),
#: eight of them 48 MB (4.1 s), the largest piece of work the gate ran in a churned room; a lecture's sixteen typed
#: sentences (10-30 pieces) stay one batch.
MAX_BATCH_TOKENS = 1024


class BatchFailed(RuntimeError):
    """The batch a request was in could not be computed; the message names the error (chained as the cause)."""


@dataclass(eq=False)
class _Request(Generic[ItemT]):
    key: Hashable
    item: ItemT
    group: Hashable
    arrived: float
    started: bool = False
    done: bool = False
    value: object = None
    error: BaseException | None = None
    batch_size: int = 0


def _env_number(name: str, default: float, least: float) -> float:
    try:
        return max(least, float(os.environ.get(name, default)))
    except ValueError:
        return default


@dataclass
class Batcher(Generic[ItemT, ValueT]):
    """Collect concurrent requests and compute them in batches (see the module's docstring).

    Args:
        compute_batch: ``items -> values``, one value per item, in order; ``items`` share one ``group``.
        window_ms: how long the oldest waiting request is held for others to join it (ms).
        max_batch: the most requests computed together.
        max_wait_s: the longest any request waits for its value before :class:`~serving.heavy.TooBusy` (s).
        weight / max_weight: ``weight(item)`` is a request's share of a batch's cost (1 each by default); a batch
            holds at most ``max_weight`` of it (``None``: no bound), and at least one request whatever it weighs.
        run: ``run(thunk, size) -> thunk()``, where a batch of ``size`` requests is computed (the gate's slot).
        deliver: ``deliver(key, value)`` for every value computed, before its waiters wake (the shared cache).
        lookup: ``lookup(key)``: a value already computed, or :data:`~serving.heavy.MISSING`.
    """

    compute_batch: Callable[[list[ItemT]], Sequence[ValueT]]
    window_ms: float = WINDOW_MS
    max_batch: int = MAX_BATCH
    max_wait_s: float = 90.0
    weight: Callable[[ItemT], int] = lambda item: 1
    max_weight: int | None = None
    run: Callable[[Callable[[], Sequence[ValueT]], int], Sequence[ValueT]] = lambda thunk, size: thunk()
    deliver: Callable[[Hashable, ValueT], None] = lambda key, value: None
    lookup: Callable[[Hashable], object] = lambda key: MISSING
    batches: int = 0  # batches computed (for tests and the load benchmark)
    _cond: threading.Condition = field(default_factory=threading.Condition, repr=False)
    _requests: dict = field(default_factory=dict, repr=False)  # key → request, waiting or being computed
    _pending: list = field(default_factory=list, repr=False)  # requests waiting for a batch, oldest first
    _worker: threading.Thread | None = field(default=None, repr=False)

    @classmethod
    def from_env(cls, compute_batch: Callable[[list[ItemT]], Sequence[ValueT]], **kwargs) -> "Batcher[ItemT, ValueT]":
        """A batcher with the window and size of :data:`WINDOW_ENV` and :data:`MAX_BATCH_ENV` (else the defaults);
        ``max_batch`` 1 turns batching off (each request alone, through the same path)."""
        return cls(
            compute_batch,
            _env_number(WINDOW_ENV, WINDOW_MS, 0.0),
            int(_env_number(MAX_BATCH_ENV, MAX_BATCH, 1)),
            **kwargs,
        )

    # --- what a page asks ---------------------------------------------------------------------------------
    def request(
        self,
        key: Hashable,
        item: ItemT,
        what: str = "the computation",
        group: Hashable = None,
        notify: Callable[[str | None], None] = lambda message: None,
    ) -> ValueT:
        """The value for ``key``: from ``lookup``, from a request for it already waiting or being computed, or
        computed from ``item`` in the next batch of ``group``.

        Raises:
            TooBusy: no value within ``max_wait_s``, or the batch found no slot in time.
            BatchFailed: the batch's computation raised (or returned the wrong number of values).
            whatever ``notify`` raises (the request stays in its batch for the others and for the cache).
        """
        start = time.monotonic()
        with self._cond:
            value = self.lookup(key)
            if value is not MISSING:
                return value  # type: ignore[return-value]
            req = self._requests.get(key)
            if req is None:
                req = self._requests[key] = _Request(key, item, group, start)
                self._pending.append(req)
                self._ensure_worker()
                self._cond.notify_all()
        while True:
            with self._cond:
                if not req.done:
                    self._cond.wait(POLL_S)
                if req.done:
                    break
                waited = time.monotonic() - start
                if req.started:
                    message = f"Computing {what} together with {req.batch_size - 1} other visitors' requests."
                    ahead = 1
                else:
                    ahead = self._pending.index(req) + (1 if self._busy() else 0) if req in self._pending else 1
                    message = (
                        f"Busy: {ahead} request{'s' if ahead != 1 else ''} ahead of yours ({what}); yours is "
                        "computed with the next batch."
                    )
                if waited > self.max_wait_s:
                    raise TooBusy(what, ahead, waited)
            notify(message)  # outside the lock: a page's script run may be interrupted right here
        notify(None)
        if req.error is None:
            return req.value  # type: ignore[return-value]
        if isinstance(req.error, TooBusy):  # a fresh one per waiter: one exception raised in many threads tangles
            raise TooBusy(what, req.error.ahead, req.error.waited_s)
        raise BatchFailed(f"{what} could not be computed: {type(req.error).__name__}: {req.error}") from req.error

    def waiting(self) -> int:
        """Requests waiting for a batch now (not yet being computed)."""
        with self._cond:
            return len(self._pending)

    # --- the worker -----------------------------------------------------------------------------------------
    def _busy(self) -> bool:
        return any(r.started for r in self._requests.values())

    def _ensure_worker(self) -> None:
        """Start the worker thread (under the lock) unless it is alive."""
        if self._worker is None or not self._worker.is_alive():
            self._worker = threading.Thread(target=self._work, name="batcher", daemon=True)
            self._worker.start()

    def _fitting(self, same: list[_Request[ItemT]]) -> list[_Request[ItemT]]:
        """The oldest of ``same`` that one batch may hold: at most ``max_batch`` of them and ``max_weight`` of their
        weight, at least the first."""
        batch: list[_Request[ItemT]] = []
        total = 0
        for r in same[: max(1, self.max_batch)]:
            total += self.weight(r.item)
            if batch and self.max_weight is not None and total > self.max_weight:
                break
            batch.append(r)
        return batch

    def _take(self) -> list[_Request[ItemT]]:
        """Wait (under the lock) for a batch: the oldest request's group, once it has waited the window or its
        waiting requests fill a batch (``max_batch`` of them, or more than ``max_weight``)."""
        while True:
            while not self._pending:
                self._cond.wait()
            group = self._pending[0].group
            same = [r for r in self._pending if r.group == group]
            left = self._pending[0].arrived + self.window_ms / 1000 - time.monotonic()
            batch = self._fitting(same)
            if len(batch) < len(same) or len(same) >= self.max_batch or left <= 0:
                for r in batch:
                    self._pending.remove(r)
                    r.started, r.batch_size = True, len(batch)
                return batch
            self._cond.wait(left)

    def _work(self) -> None:
        while True:
            with self._cond:
                batch = self._take()
            error: BaseException | None = None
            values: Sequence[ValueT] = ()
            try:
                values = self.run(functools.partial(self.compute_batch, [r.item for r in batch]), len(batch))
                if len(values) != len(batch):
                    raise ValueError(f"{len(values)} values for a batch of {len(batch)}")
                for r, value in zip(batch, values, strict=True):
                    self.deliver(r.key, value)
            except BaseException as exc:  # every waiter of the batch must hear of it; the worker goes on
                error = exc
                if not isinstance(exc, TooBusy):
                    log.exception("a batch of %d requests failed", len(batch))
            with self._cond:
                for i, r in enumerate(batch):
                    r.done, r.error = True, error
                    r.value = None if error is not None else values[i]
                    if self._requests.get(r.key) is r:
                        del self._requests[r.key]
                self.batches += 1
                self._cond.notify_all()


def batched(batcher: Batcher[ItemT, ValueT], key: Hashable, item: ItemT, what: str, group: Hashable = None) -> ValueT:
    """:meth:`Batcher.request` in a page, as :func:`serving.heavy.shared` is the gate's: a line in the page while the
    visitor waits; when the server is too busy, or the batch failed, a message says so and the script run stops
    there (``st.stop``) instead of drawing the rest of the page half-way or a traceback."""
    notify = heavy.notifier()
    try:
        return batcher.request(key, item, what, group, notify)
    except TooBusy as exc:
        notify(None)
        heavy.too_busy(exc)
        raise  # st.stop raises; this line is for type checkers
    except BatchFailed as exc:
        notify(None)
        st.error(f"{exc}. Please try again; if it happens again, the server's log has the details.")
        st.stop()
        raise


#: The first decodings of new sentences (``(checkpoint, source ids)`` → :class:`~decoding.decoded.Decoding`), batched
#: per checkpoint when they arrive together, up to :data:`MAX_BATCH_TOKENS` source tokens a batch: a batch holds the
#: process's gate for heavy work (the one it has then: a test may put in a fresh one) and leaves its decodings in the
#: gate's cache, where every later run finds them.
FIRST_DECODES: Batcher[tuple[Checkpoint, tuple[int, ...]], Decoding] = Batcher.from_env(
    lambda requests: checkpoint_decodings(requests[0][0], [list(ids) for _, ids in requests]),
    weight=lambda request: len(request[1]),
    max_weight=MAX_BATCH_TOKENS,
    run=lambda thunk, size: heavy.GATE.run(object(), thunk, f"{size} translations at once", keep=False),
    deliver=lambda key, value: heavy.GATE.keep(key, value),
    lookup=lambda key: heavy.GATE.lookup(key),
)
