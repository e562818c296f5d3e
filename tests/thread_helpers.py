"""Threads in the gate's tests: start one, wait for a condition; bounded, so a broken gate fails instead of hangs."""

from __future__ import annotations

import threading
import time

#: Seconds any wait of these tests may take before it counts as a hang
JOIN_S = 30


def start(target, *args) -> threading.Thread:
    """``target(*args)`` in a daemon thread, started."""
    thread = threading.Thread(target=target, args=args, daemon=True)
    thread.start()
    return thread


def until(condition) -> None:
    """Wait until ``condition()`` is true; fails after :data:`JOIN_S` seconds."""
    deadline = time.monotonic() + JOIN_S
    while not condition():
        assert time.monotonic() < deadline, "never got there"
        time.sleep(0.01)
