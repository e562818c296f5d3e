"""The gate for heavy work (serving/heavy.py) survives every interruption and never waits without a limit.

A visitor's click makes Streamlit raise its rerun (or stop) exception inside whatever Streamlit call the visitor's
script run is in: for the gate, inside ``notify`` (it draws the waiting line) or inside ``compute``. Whatever the
interrupted call held must come back, or with one slot every later computation of the process is "too busy".
"""

from __future__ import annotations

import threading
import time

import pytest

pytest.importorskip("streamlit")
from streamlit.runtime.scriptrunner_utils.exceptions import RerunException, StopException
from streamlit.runtime.scriptrunner_utils.script_requests import RerunData
from thread_helpers import JOIN_S, start, until

from serving.heavy import Gate, TooBusy

INTERRUPTIONS = [lambda: RerunException(RerunData()), lambda: StopException()]


def assert_free(gate: Gate) -> None:
    """Nothing held, and the next computation runs at once (not after ``max_wait_s``)."""
    assert gate._busy == 0 and not gate._running and not gate._line and gate.sharing() == 0
    began = time.monotonic()
    assert gate.run(("next", began), lambda: "ran") == "ran"
    assert time.monotonic() - began < gate.max_wait_s


def interrupting(exception, when):
    """A ``notify`` that raises ``exception()`` at its first call whose message ``when(message)`` accepts."""

    def notify(message):
        if when(message):
            raise exception()

    return notify


@pytest.mark.parametrize("exception", INTERRUPTIONS, ids=["rerun", "stop"])
@pytest.mark.parametrize("point", ["waiting in line", "sharing a computation", "slot taken", "cached", "compute"])
def test_an_interrupted_visitor_gives_back_everything_they_held(point, exception):
    gate = Gate(slots=1, max_wait_s=3.0)
    release = threading.Event()
    blocker = None
    if point in ("waiting in line", "sharing a computation"):
        shared_key = "k" if point == "sharing a computation" else "other"
        blocker = start(gate.run, shared_key, lambda: release.wait(JOIN_S) and "blocked")
        until(lambda: gate.computed == 1)
    if point == "cached":
        gate.run("k", lambda: "kept")
    notify = interrupting(exception, (lambda m: m is not None) if blocker else (lambda m: m is None))
    compute = lambda: "value"  # noqa: E731
    if point == "compute":
        notify = lambda message: None  # noqa: E731

        def compute():
            raise exception()

    with pytest.raises((RerunException, StopException)):
        gate.run("k", compute, "the decoding", notify)
    release.set()
    if blocker is not None:
        blocker.join(JOIN_S)
    assert_free(gate)
    assert point == "cached" or point == "sharing a computation" or not gate.cached("k")


def test_a_wait_for_another_visitors_computation_has_a_time_limit():
    gate = Gate(slots=1, max_wait_s=0.3)
    release = threading.Event()
    blocker = start(gate.run, "k", lambda: release.wait(JOIN_S) and "slow")
    until(lambda: gate.computed == 1)
    began = time.monotonic()
    with pytest.raises(TooBusy) as info:
        gate.run("k", lambda: "never")
    assert time.monotonic() - began < JOIN_S and info.value.ahead == 1 and gate.sharing() == 0
    release.set()
    blocker.join(JOIN_S)
    assert gate.run("k", lambda: "never") == "slow"  # the shared value is there for the next visitor


def test_a_visitor_waiting_for_a_shared_result_does_not_hold_up_the_line():
    gate = Gate(slots=2, max_wait_s=JOIN_S)
    release_x, release_y, release_k = threading.Event(), threading.Event(), threading.Event()
    threads = [
        start(gate.run, name, lambda e=event: e.wait(JOIN_S)) for name, event in (("x", release_x), ("y", release_y))
    ]
    until(lambda: gate.computed == 2)
    threads.append(start(gate.run, "k", lambda: release_k.wait(JOIN_S) and "k"))  # first in line for k
    until(lambda: gate.waiting() == 1)
    threads.append(start(gate.run, "k", lambda: "k again"))  # second in line, for the same k
    until(lambda: gate.waiting() == 2)
    release_x.set()  # one slot frees: the first k starts, the second one now waits for it, out of the line
    until(lambda: gate.sharing() == 1)
    c_started = threading.Event()
    threads.append(start(gate.run, "c", lambda: c_started.set() or "c"))
    until(lambda: gate.waiting() == 1)
    release_y.set()  # the other slot frees: c must start although the k visitor arrived before it
    assert c_started.wait(5), "a visitor waiting for a shared result held up the line"
    release_k.set()
    for thread in threads:
        thread.join(JOIN_S)
    assert gate.computed == 4 and gate.sharing() == 0
