"""The heavy-work gate's line: quick computations first, arrival order among each kind and once patience runs out;
and the gate serving a click's quick re-computation before a long first decoding that came earlier."""

from __future__ import annotations

import threading
import time

from serving.heavy import Gate
from serving.line import Line


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_an_unknown_key_waits_in_arrival_order():
    line = Line(clock=Clock())
    tickets = [line.join(k) for k in ("a", "b", "c")]
    assert line.order() == tickets and line.first() == tickets[0]
    assert [line.ahead_of(t) for t in tickets] == [0, 1, 2]
    line.leave(tickets[0])
    assert line.order() == tickets[1:] and len(line) == 2


def test_a_key_that_was_quick_goes_ahead_of_slow_and_unknown_ones():
    clock = Clock()
    line = Line(quick_s=0.5, patience_s=10, clock=clock)
    line.took("trace", 0.1)
    line.took("decoding", 4.0)
    slow, unknown, quick, quick_too = (line.join(k) for k in ("decoding", "new", "trace", "trace"))
    assert line.order() == [quick, quick_too, slow, unknown]  # each kind in arrival order
    assert line.first() == quick and line.ahead_of(slow) == 2
    line.took("new", 0.2)  # known only after its ticket was taken: the ticket keeps its kind
    assert line.order()[-1] == unknown


def test_a_ticket_that_has_waited_its_patience_is_not_overtaken():
    clock = Clock()
    line = Line(quick_s=0.5, patience_s=10, clock=clock)
    line.took("trace", 0.1)
    slow = line.join("decoding")
    clock.now = 6.0
    quick = line.join("trace")
    assert line.first() == quick
    clock.now = 10.0  # the slow one has waited 10 s: its turn comes in arrival order
    assert line.order() == [slow, quick]


def test_only_the_most_recent_durations_are_remembered():
    line = Line(remembered=2, clock=Clock())
    for key in ("a", "b", "c"):
        line.took(key, 0.1)
    first, second = line.join("a"), line.join("c")
    assert line.order() == [second, first]  # "a" was forgotten: unknown, so after the quick "c"


def test_the_gate_serves_a_known_quick_recomputation_before_an_earlier_slow_one():
    """One slot, held; a slow first computation joins the line, then a quick one whose result the cache did not keep
    (``keep=False``, as when the byte budget dropped it): the quick one runs first once the slot is free."""
    gate = Gate(slots=1, max_wait_s=30)
    gate.run("trace", lambda: "traced", keep=False)  # its duration is remembered, its value not kept
    release, started, order = threading.Event(), threading.Event(), []

    def hold():
        started.set()
        release.wait(10)
        return "held"

    def ask(key):
        gate.run(key, lambda: order.append(key) or key, keep=False)

    threads = [threading.Thread(target=gate.run, args=("hold", hold))]
    threads[0].start()
    assert started.wait(10)
    for key in ("decoding", "trace"):
        threads.append(threading.Thread(target=ask, args=(key,)))
        threads[-1].start()
        deadline = time.monotonic() + 10
        while gate.waiting() < len(threads) - 1 and time.monotonic() < deadline:
            time.sleep(0.01)
    assert gate.waiting() == 2
    release.set()
    for t in threads:
        t.join(10)
    assert order == ["trace", "decoding"]
    assert gate.stats()["busy"] == 0 and gate.waiting() == 0
