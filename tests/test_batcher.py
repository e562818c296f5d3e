"""Dynamic batching (serving/batcher.py): requests that arrive together are computed in one call, each waiter gets its
own value or a clear error, an interrupted waiter costs the others nothing, and no wait is unbounded.

Threads stand in for visitors' script runs. The first batch is held on an event while the others pile up behind
it, so which requests share a batch never depends on timing (the window is 0); the only clock is the batcher's own
``max_wait_s``, set far below the test's timeouts.
"""

from __future__ import annotations

import threading

import numpy as np
import pytest

pytest.importorskip("streamlit")

from serving.batcher import MAX_BATCH_ENV, WINDOW_ENV, Batcher, BatchFailed
from serving.heavy import MISSING, Gate, TooBusy

JOIN_S = 30


class Rerun(Exception):
    """Stands in for Streamlit's RerunException, raised in a waiting visitor's script run by their click."""


def until(condition, timeout_s: float = JOIN_S) -> None:
    done = threading.Event()
    for _ in range(int(timeout_s / 0.01)):
        if condition():
            return
        done.wait(0.01)
    raise AssertionError("condition not reached")


class Held:
    """``compute_batch`` that records each batch and holds the first one until :meth:`release`."""

    def __init__(self, fail: Exception | None = None):
        self.batches: list[list] = []
        self.gate, self.started, self.fail = threading.Event(), threading.Event(), fail

    def __call__(self, items):
        self.batches.append(list(items))
        self.started.set()
        assert self.gate.wait(JOIN_S)
        if self.fail is not None and len(self.batches) > 1:
            raise self.fail
        return [f"value of {i}" for i in items]

    def release(self):
        self.gate.set()


def ask(batcher, results, key, item, **kw) -> threading.Thread:
    def go():
        try:
            results[key] = batcher.request(key, item, "the translation", **kw)
        except Exception as exc:  # what the waiter was told
            results[key] = exc

    thread = threading.Thread(target=go, daemon=True)
    thread.start()
    return thread


def in_turn(batcher, results, key, item, **kw) -> threading.Thread:
    """:func:`ask`, returning once the request waits in line: requests asked in turn arrive in that order."""
    before = batcher.waiting()
    thread = ask(batcher, results, key, item, **kw)
    until(lambda: batcher.waiting() > before)
    return thread


def pile_up(batcher, held, results, n: int, **kw) -> list[threading.Thread]:
    """One request held in a first batch, then ``n`` more waiting for the next, in order."""
    first = ask(batcher, results, "first", "first")
    assert held.started.wait(JOIN_S)
    return [first] + [in_turn(batcher, results, f"k{i}", i, **kw) for i in range(n)]


def test_requests_arriving_together_are_one_batched_call_and_each_gets_its_own_value():
    held = Held()
    batcher, results = Batcher(held, window_ms=0, max_batch=16), {}
    threads = pile_up(batcher, held, results, 10)
    held.release()
    for t in threads:
        t.join(JOIN_S)
    assert held.batches == [["first"], list(range(10))] and batcher.batches == 2
    assert results == {"first": "value of first"} | {f"k{i}": f"value of {i}" for i in range(10)}


def test_a_batch_holds_at_most_max_batch_the_oldest_first_and_one_group_only():
    held = Held()
    batcher, results = Batcher(held, window_ms=0, max_batch=3), {}
    first = ask(batcher, results, "first", "first", group="a")
    assert held.started.wait(JOIN_S)
    threads = [first] + [in_turn(batcher, results, f"k{i}", i, group="ab"[i % 2]) for i in range(8)]
    held.release()
    for t in threads:
        t.join(JOIN_S)
    assert held.batches[1:] == [[0, 2, 4], [1, 3, 5], [6], [7]]  # each batch: the oldest request's group
    assert all(results[f"k{i}"] == f"value of {i}" for i in range(8))


def test_a_key_asked_twice_is_computed_once_and_a_delivered_one_not_again():
    held, kept = Held(), {}
    batcher = Batcher(held, window_ms=0, deliver=kept.__setitem__, lookup=lambda k: kept.get(k, MISSING))
    results, second = {}, {}
    threads = pile_up(batcher, held, results, 1)
    threads.append(ask(batcher, second, "k0", "again"))  # the same key: joins it, or finds it delivered
    held.release()
    for t in threads:
        t.join(JOIN_S)
    assert held.batches == [["first"], [0]] and second == {"k0": "value of 0"}
    assert batcher.request("k0", "never computed") == "value of 0" and batcher.batches == 2  # from the cache


def test_an_error_in_the_model_reaches_every_waiter_as_a_clear_error_and_the_batcher_goes_on():
    held = Held(fail=RuntimeError("CUDA out of memory"))
    batcher, results = Batcher(held, window_ms=0), {}
    threads = pile_up(batcher, held, results, 4)
    held.release()
    for t in threads:
        t.join(JOIN_S)
    assert results["first"] == "value of first"
    for i in range(4):
        err = results[f"k{i}"]
        assert isinstance(err, BatchFailed) and "the translation could not be computed" in str(err)
        assert "RuntimeError: CUDA out of memory" in str(err) and isinstance(err.__cause__, RuntimeError)
    held.fail = None
    assert batcher.request("later", 1) == "value of 1"  # nothing cached of the failure; the worker lives on


def test_a_wrong_number_of_values_is_an_error_for_every_waiter():
    batcher = Batcher(lambda items: ["one"] * (len(items) + 1), window_ms=0)
    with pytest.raises(BatchFailed, match="2 values for a batch of 1"):
        batcher.request("k", 1)


def test_a_waiter_interrupted_by_a_rerun_leaves_the_others_served_and_its_value_cached():
    held, kept = Held(), {}
    batcher = Batcher(held, window_ms=0, deliver=kept.__setitem__)
    results, told = {}, []

    def interrupted(message):
        told.append(message)
        raise Rerun()

    first = ask(batcher, results, "first", "first")
    assert held.started.wait(JOIN_S)
    others = [in_turn(batcher, results, f"k{i}", i) for i in range(3)]
    leaver = in_turn(batcher, results, "leaver", "L", notify=interrupted)
    leaver.join(JOIN_S)  # its first message (after one poll) interrupts it
    assert isinstance(results["leaver"], Rerun) and "ahead of yours" in told[0]
    held.release()
    for t in [first, *others]:
        t.join(JOIN_S)
    assert held.batches[1] == [0, 1, 2, "L"] and all(results[f"k{i}"] == f"value of {i}" for i in range(3))
    assert kept["leaver"] == "value of L"  # the visitor's rerun finds it


def test_every_wait_has_a_time_limit():
    held = Held()
    batcher, results = Batcher(held, window_ms=0, max_wait_s=0.3), {}
    first = ask(batcher, results, "first", "first")
    assert held.started.wait(JOIN_S)
    ask(batcher, results, "late", 1).join(JOIN_S)
    assert isinstance(results["late"], TooBusy) and "the translation" in str(results["late"])
    first.join(JOIN_S)  # held as long: told the same
    assert isinstance(results["first"], TooBusy)
    held.release()
    assert batcher.request("again", 2) == "value of 2"  # the held batches end; the worker goes on


def test_no_slot_in_time_is_too_busy_for_every_waiter():
    gate = Gate(slots=1, max_wait_s=0.3)
    hold, holding = threading.Event(), threading.Event()
    blocker = threading.Thread(target=gate.run, args=("other", lambda: holding.set() or hold.wait(JOIN_S)), daemon=True)
    blocker.start()
    assert holding.wait(JOIN_S)
    batcher = Batcher(
        lambda items: list(items),
        window_ms=0,
        run=lambda thunk, size: gate.run(object(), thunk, f"{size} at once", keep=False),
    )
    with pytest.raises(TooBusy):
        batcher.request("k", 1)
    hold.set()
    blocker.join(JOIN_S)
    assert batcher.request("k", 1) == 1


def test_the_gate_keeps_what_a_batch_delivers_within_its_byte_budget():
    from serving.memory import nbytes

    gate = Gate(budget=2 * nbytes(np.full(100, 0.0)))  # room for two of the values below
    assert gate.lookup("a") is MISSING
    for i, key in enumerate("abc"):
        gate.keep(key, np.full(100, float(i)))
    assert gate.lookup("a") is MISSING and gate.lookup("b")[0] == 1.0 and gate.run("c", lambda: "never")[0] == 2.0


def test_window_and_size_come_from_the_environment(monkeypatch):
    monkeypatch.setenv(WINDOW_ENV, "5")
    monkeypatch.setenv(MAX_BATCH_ENV, "1")
    batcher = Batcher.from_env(lambda items: list(items))
    assert (batcher.window_ms, batcher.max_batch) == (5.0, 1) and batcher.request("k", 7) == 7
    monkeypatch.setenv(MAX_BATCH_ENV, "lots")
    assert Batcher.from_env(lambda items: list(items)).max_batch == 16


def test_a_batch_holds_at_most_max_weight_and_a_heavy_request_goes_alone():
    """Long sentences are heavier: a batch stops before the request that would take it over ``max_weight`` (the
    oldest first, so no request is passed over), and a request heavier than that on its own still goes, alone."""
    held = Held()
    batcher, results = Batcher(held, window_ms=0, max_batch=16, weight=len, max_weight=10), {}
    first = ask(batcher, results, "first", "f")
    assert held.started.wait(JOIN_S)
    items = ["aaaa", "bbbb", "cc", "dddddddddddd", "e", "ffff", "gggggg"]  # weights 4 4 2 12 1 4 6
    threads = [first] + [in_turn(batcher, results, f"k{i}", item) for i, item in enumerate(items)]
    held.release()
    for t in threads:
        t.join(JOIN_S)
    assert held.batches[1:] == [["aaaa", "bbbb", "cc"], ["dddddddddddd"], ["e", "ffff"], ["gggggg"]]
    assert all(results[f"k{i}"] == f"value of {item}" for i, item in enumerate(items))


def test_the_first_decodings_are_bounded_by_their_source_tokens():
    from serving.batcher import FIRST_DECODES, MAX_BATCH_TOKENS

    assert FIRST_DECODES.max_weight == MAX_BATCH_TOKENS
    assert FIRST_DECODES.weight((None, tuple(range(128)))) == 128  # a sentence at the input cap: 8 of them a batch
