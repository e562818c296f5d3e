"""The gate for heavy work (serving/heavy.py): bounded, first come first served, computed once, shared, never a hang.

Threads stand in for visitors' script runs. Every wait is released by an event the test sets, never by timing,
except the gate's own ``max_wait_s`` (set far below the test's own timeouts).
"""

from __future__ import annotations

import threading

import pytest

pytest.importorskip("streamlit")
from streamlit.testing.v1 import AppTest

from serving.heavy import Gate, TooBusy

JOIN_S = 30


def start(target, *args) -> threading.Thread:
    thread = threading.Thread(target=target, args=args, daemon=True)
    thread.start()
    return thread


def test_a_value_is_computed_once_and_shared():
    gate = Gate(slots=1)
    calls = []
    assert gate.run("k", lambda: calls.append(1) or "value") == "value"
    assert gate.run("k", lambda: calls.append(1) or "other") == "value"
    assert calls == [1] and gate.cached("k") and gate.computed == 1


def test_a_value_not_kept_is_computed_again_each_time():
    gate = Gate(slots=1)
    assert gate.run("timing", lambda: 1.0, keep=False) == 1.0 and gate.run("timing", lambda: 2.0, keep=False) == 2.0
    assert not gate.cached("timing") and gate.computed == 2


def test_visitors_asking_for_one_thing_at_once_share_one_computation():
    gate = Gate(slots=2)
    release, started = threading.Event(), threading.Event()
    calls, results, messages = [], [], []

    def slow():
        calls.append(1)
        started.set()
        assert release.wait(JOIN_S)
        return ("frozen", "result")

    first = start(lambda: results.append(gate.run("sweep", slow)))
    assert started.wait(JOIN_S)
    second = start(lambda: results.append(gate.run("sweep", slow, "the sweep", messages.append)))
    while not messages:  # the second visitor is told someone else's computation will be shared
        threading.Event().wait(0.05)
    release.set()
    first.join(JOIN_S), second.join(JOIN_S)
    assert calls == [1] and results == [("frozen", "result")] * 2
    assert "shared" in messages[0] and messages[-1] is None


def test_at_most_slots_run_at_once_and_the_others_see_their_place_in_line():
    gate = Gate(slots=1)
    release = threading.Event()
    running, peak, lock = [0], [0], threading.Lock()
    seen: dict[str, list] = {}

    def work(name):
        def compute():
            with lock:
                running[0] += 1
                peak[0] = max(peak[0], running[0])
            assert release.wait(JOIN_S)
            with lock:
                running[0] -= 1
            return name

        return compute

    first = start(gate.run, "a", work("a"))
    while gate.computed == 0:
        threading.Event().wait(0.01)
    others = [start(lambda n=n: gate.run(n, work(n), f"job {n}", seen.setdefault(n, []).append)) for n in "bc"]
    while gate.waiting() < 2 or not all(seen.get(n) for n in "bc"):
        threading.Event().wait(0.05)
    release.set()
    for t in [first, *others]:
        t.join(JOIN_S)
    assert peak[0] == 1 and gate.computed == 3
    assert any("1 heavy computation ahead" in m for m in seen["b"] if m)  # b waits behind the running a
    assert any("2 heavy computations ahead" in m for m in seen["c"] if m)  # c behind a and b


def test_too_long_a_wait_is_refused_with_the_number_ahead_and_leaves_the_line():
    gate = Gate(slots=1, max_wait_s=0.3)
    release = threading.Event()
    blocker = start(gate.run, "a", lambda: release.wait(JOIN_S))
    while gate.computed == 0:
        threading.Event().wait(0.01)
    with pytest.raises(TooBusy) as info:
        gate.run("b", lambda: "never")
    assert info.value.ahead == 1 and gate.waiting() == 0
    release.set()
    blocker.join(JOIN_S)
    assert gate.run("b", lambda: "now") == "now"


def test_a_visitor_who_leaves_the_line_frees_the_place_and_a_failure_is_not_cached():
    gate = Gate(slots=1)
    release = threading.Event()
    blocker = start(gate.run, "a", lambda: release.wait(JOIN_S))
    while gate.computed == 0:
        threading.Event().wait(0.01)

    class Interrupted(Exception):  # what Streamlit raises in a script run when the visitor clicks again
        pass

    def leave(message):
        if message:
            raise Interrupted

    with pytest.raises(Interrupted):
        gate.run("b", lambda: "never", notify=leave)
    assert gate.waiting() == 0
    release.set()
    blocker.join(JOIN_S)
    with pytest.raises(ZeroDivisionError):
        gate.run("c", lambda: 1 / 0)
    assert not gate.cached("c") and gate.run("c", lambda: "fine") == "fine"


PAGE = """
import streamlit as st
from serving.heavy import Gate, shared
gate = st.session_state.setdefault("gate", Gate(slots=1, max_wait_s=0.6))
value = shared("sentence", lambda: "Der Satz.", "the decoding", gate=gate)
st.write("value:", value)
"""


def test_a_page_shows_a_clear_message_when_the_server_is_too_busy():
    at = AppTest.from_string(PAGE, default_timeout=30).run()
    assert not at.exception and "Der Satz." in at.markdown[0].value
    gate = at.session_state["gate"]
    release = threading.Event()
    blocker = start(gate.run, "other", lambda: release.wait(JOIN_S))
    while gate.computed < 2:
        threading.Event().wait(0.01)
    gate._results.clear()  # the sentence must be computed again, behind the blocker
    at.run()
    release.set()
    blocker.join(JOIN_S)
    assert not at.exception
    assert "too busy" in at.warning[0].value and "1 other computation was still ahead" in at.warning[0].value
    assert not at.markdown  # the page stopped before drawing a half-computed view


def test_a_server_process_gives_torch_the_threads_it_is_told(monkeypatch):
    import torch

    from serving.heavy import THREADS_ENV, configure_torch

    before = torch.get_num_threads()
    try:
        monkeypatch.delenv(THREADS_ENV, raising=False)
        assert configure_torch() == 1 and torch.get_num_threads() == 1
        monkeypatch.setenv(THREADS_ENV, "2")
        assert configure_torch() == 2 and torch.get_num_threads() == 2
        monkeypatch.setenv(THREADS_ENV, "many")  # a bad value keeps the default
        assert configure_torch() == 1
    finally:
        torch.set_num_threads(before)
