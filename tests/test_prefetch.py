"""Prefetch (serving/prefetch.py and Gate.prefetch in serving/heavy.py): heavy work computed before a visitor asks for
it, served from the shared cache, bounded, never ahead of a visitor, never holding a slot after it fails.

Threads stand in for visitors' script runs. Every wait is released by an event the test sets, never by timing,
except the gate's own ``max_wait_s`` (set far below the test's own timeouts).
"""

from __future__ import annotations

import threading
import time

import pytest

pytest.importorskip("streamlit")

from thread_helpers import JOIN_S, start, until

from serving.heavy import Gate, TooBusy
from serving.prefetch import Prefetcher


def assert_free(gate: Gate) -> None:
    stats = gate.stats()
    assert stats["busy"] == stats["running"] == stats["waiting"] == stats["sharing"] == stats["background"] == 0


def blocked(
    gate: Gate, key, release: threading.Event, started: threading.Event | None = None, value="visitor's"
) -> threading.Thread:
    """A visitor computing ``key`` until ``release`` is set."""

    def compute():
        if started is not None:
            started.set()
        assert release.wait(JOIN_S)
        return value

    return start(gate.run, key, compute)


def test_a_prefetched_step_is_served_from_the_cache():
    gate, prefetcher = Gate(slots=1), Prefetcher(cap=4)
    calls = []
    assert prefetcher.ask("step 4", [lambda g: g.prefetch("attr 4", lambda: calls.append(1) or ("frozen", 4))], gate)
    until(prefetcher.idle)
    assert gate.cached("attr 4") and calls == [1] and prefetcher.done == 1
    assert gate.run("attr 4", lambda: calls.append(2) or "computed again") == ("frozen", 4)
    assert calls == [1] and gate.computed == 0 and gate.stats()["prefetched"] == 1  # no visitor computed anything
    assert not gate.prefetch("attr 4", lambda: calls.append(3))  # kept already: nothing to do
    assert calls == [1]
    assert_free(gate)


def test_a_visitor_who_asks_while_it_is_prefetched_shares_that_computation():
    gate, prefetcher = Gate(slots=1), Prefetcher(cap=4)
    release, started, calls, results = threading.Event(), threading.Event(), [], []

    def compute():
        calls.append("prefetch")
        started.set()
        assert release.wait(JOIN_S)
        return "ready"

    prefetcher.ask("step 2", [lambda g: g.prefetch("attr 2", compute)], gate)
    assert started.wait(JOIN_S)
    messages: list = []
    visitor = start(lambda: results.append(gate.run("attr 2", lambda: calls.append("visitor"), "it", messages.append)))
    until(lambda: gate.sharing() == 1)
    release.set()
    visitor.join(JOIN_S)
    assert calls == ["prefetch"] and results == ["ready"] and "shared" in messages[0]
    until(prefetcher.idle)
    assert_free(gate)


def test_prefetch_never_exceeds_its_cap_and_runs_one_job_at_a_time_newest_first():
    gate, prefetcher = Gate(slots=4), Prefetcher(cap=3)
    release, started = threading.Event(), threading.Event()
    ran, running, peak, lock = [], [0], [0], threading.Lock()

    def job(name):
        def work(g):
            with lock:
                running[0] += 1
                peak[0] = max(peak[0], running[0])
            ran.append(name)
            started.set()
            assert release.wait(JOIN_S)
            g.prefetch(name, lambda: name)
            with lock:
                running[0] -= 1

        return work

    prefetcher.ask("first", [job("first")], gate)
    assert started.wait(JOIN_S)
    for i in range(10):
        prefetcher.ask(f"job {i}", [job(f"job {i}")], gate)
        assert prefetcher.waiting() <= 3
    assert prefetcher.dropped == 7
    prefetcher.ask("job 8", [job("job 8")], gate)  # asked again: to the front, not twice
    assert not prefetcher.ask("first", [job("first")], gate)  # running now: not queued again
    assert prefetcher.waiting() == 3
    release.set()
    until(prefetcher.idle)
    assert ran == ["first", "job 8", "job 9", "job 7"] and peak[0] == 1 and gate.stats()["prefetched"] == 4
    assert_free(gate)


def test_prefetch_off_queues_nothing():
    prefetcher = Prefetcher(cap=0)
    assert not prefetcher.ask("k", [lambda g: pytest.fail("ran")]) and prefetcher.idle()


def test_a_failing_prefetch_frees_its_slot_and_the_worker_goes_on():
    gate, prefetcher = Gate(slots=1, max_wait_s=3.0), Prefetcher(cap=4)

    def broken():
        raise RuntimeError("out of memory")

    with pytest.raises(RuntimeError):
        gate.prefetch("broken", broken)
    assert_free(gate) and not gate.cached("broken")
    prefetcher.ask("broken", [lambda g: g.prefetch("broken", broken)], gate)
    until(prefetcher.idle)
    assert prefetcher.failed == 1 and not gate.cached("broken")
    assert_free(gate)
    began = time.monotonic()  # the slot is free: a visitor's computation runs at once, not after max_wait_s
    assert gate.run("next", lambda: "ran") == "ran" and time.monotonic() - began < gate.max_wait_s
    prefetcher.ask("fine", [lambda g: g.prefetch("fine", lambda: "fine")], gate)
    until(prefetcher.idle)
    assert gate.cached("fine") and prefetcher.done == 1


def test_prefetch_yields_to_visitors():
    gate = Gate(slots=1)
    release_a, started_a, order = threading.Event(), threading.Event(), []
    a = blocked(gate, "a", release_a, started_a)
    assert started_a.wait(JOIN_S)
    background = start(gate.prefetch, "later", lambda: order.append("prefetch") or "later")
    until(lambda: gate.stats()["background"] == 1)
    b = start(gate.run, "b", lambda: order.append("visitor b") or "b")  # arrives after the prefetch asked
    until(lambda: gate.waiting() == 1)
    release_a.set()
    for thread in (a, b, background):
        thread.join(JOIN_S)
    assert order == ["visitor b", "prefetch"] and gate.cached("later")
    assert gate.computed == 2 and gate.stats()["prefetched"] == 1
    assert_free(gate)


def test_a_prefetch_that_never_finds_a_free_slot_gives_up_and_holds_nothing():
    gate = Gate(slots=1, max_wait_s=0.5)
    release = threading.Event()
    visitor = blocked(gate, "a", release)
    until(lambda: gate.stats()["busy"] == 1)
    with pytest.raises(TooBusy):
        gate.prefetch("later", lambda: "later")
    release.set()
    visitor.join(JOIN_S)
    assert not gate.cached("later")
    assert_free(gate)
    prefetcher = Prefetcher(cap=2)  # in the worker, too busy is the prefetch giving way, not a failure
    release2 = threading.Event()
    visitor = blocked(gate, "c", release2)
    until(lambda: gate.stats()["busy"] == 1)
    prefetcher.ask("later", [lambda g: g.prefetch("later", lambda: "later")], gate)
    until(prefetcher.idle)
    release2.set()
    visitor.join(JOIN_S)
    assert prefetcher.failed == 0 and prefetcher.dropped == 1 and not gate.cached("later")
    assert_free(gate)


def test_a_job_whose_session_ended_or_that_waited_too_long_is_dropped_unrun():
    gate = Gate(slots=1)
    prefetcher = Prefetcher(cap=4)
    prefetcher.ask("gone", [lambda g: pytest.fail("ran for a closed session")], gate, alive=lambda: False)
    until(prefetcher.idle)
    assert prefetcher.dropped == 1 and prefetcher.done == 0
    stale = Prefetcher(cap=4, max_age_s=0.0)
    stale.ask("old", [lambda g: pytest.fail("ran too late")], gate)
    until(stale.idle)
    assert stale.dropped == 1 and stale.done == 0
    assert_free(gate)


def test_a_job_stops_between_tasks_when_its_session_ends_or_the_server_exits():
    gate = Gate(slots=1)
    prefetcher = Prefetcher(cap=4)
    release, started, ran, open_ = threading.Event(), threading.Event(), [], [True]

    def first(g):
        ran.append("first")
        started.set()
        assert release.wait(JOIN_S)

    prefetcher.ask("steps", [first, lambda g: ran.append("second")], gate, alive=lambda: open_[0])
    assert started.wait(JOIN_S)
    open_[0] = False  # the visitor left while the first task ran
    release.set()
    until(prefetcher.idle)
    assert ran == ["first"] and prefetcher.dropped == 1

    release.clear(), started.clear(), ran.clear()
    prefetcher.ask("steps", [first, lambda g: ran.append("second")], gate)
    assert started.wait(JOIN_S)
    prefetcher.ask("queued", [lambda g: ran.append("queued")], gate)
    threading.Timer(0.2, release.set).start()
    assert prefetcher.close(timeout_s=JOIN_S)  # waits for the task in flight, drops the rest
    assert ran == ["first"] and prefetcher.idle()
    assert not prefetcher.ask("after", [lambda g: ran.append("after")], gate)
    assert_free(gate)
