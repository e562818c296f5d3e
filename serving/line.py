"""The order in which the heavy-work gate's waiting computations get a slot: first come, first served, except that a
computation known to be quick goes ahead of slower ones.

A room whose first decodings of long new sentences fill the line (seconds each) also asks again for what the gate's
byte budget dropped: a trace, traced again in a tenth of a second, that a visitor's click needs now. First come, first
served made that click wait for every long decoding ahead of it (a churned soak's clicks p95 went from 0.6 to 6-13 s
whenever the budget kept less). Shortest job first is the order that minimises the mean wait (Smith's rule, 1956); a
key's last duration is the estimate of its next one. A waiting computation is never overtaken once it has waited
:data:`PATIENCE_S`, so a stream of quick ones cannot starve a slow one.

:class:`Line` is plain bookkeeping and not thread-safe: :class:`serving.heavy.Gate` calls it under its own lock.
"""

from __future__ import annotations

import itertools
import time
from collections import OrderedDict
from typing import Callable, Hashable

#: A computation whose key took at most this long the last time it was computed (seconds) goes ahead of the others.
QUICK_S = 0.5
#: A waiting computation that has waited this long (seconds) is served in its arrival order, quick ones or not.
PATIENCE_S = 10.0
#: How many keys' last durations are remembered (a float each: ~100 bytes with the key's entry), least recent dropped.
REMEMBERED = 4096


class Line:
    """Tickets waiting for a slot, served quick ones first (see the module).

    Args:
        quick_s: the longest last duration (s) that counts as quick.
        patience_s: the wait (s) after which a ticket is served in arrival order.
        remembered: how many keys' durations are kept.
        clock: seconds, monotonic (tests pass their own).
    """

    def __init__(
        self,
        quick_s: float = QUICK_S,
        patience_s: float = PATIENCE_S,
        remembered: int = REMEMBERED,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.quick_s, self.patience_s, self.remembered, self.clock = quick_s, patience_s, remembered, clock
        self._tickets: list[int] = []  # in arrival order
        self._since: dict[int, float] = {}
        self._quick: set[int] = set()
        self._took: OrderedDict[Hashable, float] = OrderedDict()
        self._count = itertools.count()

    def __len__(self) -> int:
        return len(self._tickets)

    def join(self, key: Hashable) -> int:
        """A new ticket for a computation of ``key``, at the end of the line."""
        ticket = next(self._count)
        self._tickets.append(ticket)
        self._since[ticket] = self.clock()
        if self._took.get(key, float("inf")) <= self.quick_s:
            self._quick.add(ticket)
        return ticket

    def leave(self, ticket: int) -> None:
        """``ticket`` leaves the line (served, refused or gone)."""
        self._tickets.remove(ticket)
        del self._since[ticket]
        self._quick.discard(ticket)

    def order(self) -> list[int]:
        """The tickets in the order the next slots go to them: quick ones first, each kind in arrival order, except
        that the tickets that have waited :data:`PATIENCE_S` keep their arrival order at the head."""
        now = self.clock()
        patient = [t for t in self._tickets if now - self._since[t] >= self.patience_s]
        rest = [t for t in self._tickets if now - self._since[t] < self.patience_s]
        return patient + [t for t in rest if t in self._quick] + [t for t in rest if t not in self._quick]

    def first(self) -> int | None:
        """The ticket the next free slot goes to, or ``None`` when the line is empty."""
        order = self.order()
        return order[0] if order else None

    def ahead_of(self, ticket: int) -> int:
        """How many waiting tickets are served before ``ticket``, as the line stands now."""
        return self.order().index(ticket)

    def took(self, key: Hashable, seconds: float) -> None:
        """Remember that ``key``'s computation took ``seconds``: its next request is served by that estimate."""
        self._took[key] = seconds
        self._took.move_to_end(key)
        while len(self._took) > self.remembered:
            self._took.popitem(last=False)
