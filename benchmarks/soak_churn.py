"""Visitors who come and go, with new sentences every minute, for ``python -m benchmarks.soak --churn``.

A room is not the same fifty sessions for half an hour: visitors arrive, stay a minute or two and leave, and the
sentences change. Each churn visitor (:func:`churn_visitor`) opens Translate (a third of them with the logit lens
or the attribution view on) or the Attention page on a sentence of the current minute (:func:`churn_sentence`:
:data:`PER_MINUTE` new ones a minute, half of them near the input cap, :data:`decoding.stepping.MAX_INPUT_CHARS`
characters, which the model cuts to its longest input), acts every 2–5 s for a stay of 20–90 s, leaves (closes
its websocket), and a new visitor takes its place 1–5 s later. So every minute brings first decodings, traces and
figures the caches have never seen, and the caches' byte budgets (:mod:`serving.memory`) are what bounds the memory.
"""

from __future__ import annotations

import asyncio
import random
import time
from typing import Callable

from benchmarks.load_client import Outcome, Visitor
from benchmarks.load_scenarios import AttentionBrowsing, StepThrough, demo_sentences
from decoding.stepping import MAX_INPUT_CHARS
from serving.memory import GIVE_BACK_S

#: New sentences a minute (every visitor of that minute picks one of them).
PER_MINUTE = 8
#: Characters of a long sentence: just under the input cap.
LONG_CHARS = MAX_INPUT_CHARS - 20
#: Seconds between the warm-up visits' departure and a reading of the baseline: one period of the server's trim
#: (:data:`serving.memory.GIVE_BACK_S`) and a moment, so that the baseline holds the model and the warm-up's sentence,
#: not what its page runs used for a moment.
SETTLE_S = GIVE_BACK_S + 5
#: The warm-up's sentence: short, so that what its visits leave in the caches is a few kB.
WARM_TEXT = "My brother lives in Berlin."


def churn_sentence(minute: int, k: int) -> str:
    """The ``k``-th sentence of ``minute``: distinct for every ``(minute, k)``; odd ``k`` give texts of
    :data:`LONG_CHARS` characters (whole sentences, the last one cut at a space)."""
    pool = demo_sentences()
    rng = random.Random(minute * 1000 + k)
    first = f"In minute {minute}, {pool[rng.randrange(len(pool))].lower()}"
    if k % 2 == 0:
        return first
    parts = [first]
    while sum(len(p) + 1 for p in parts) < LONG_CHARS:
        parts.append(pool[rng.randrange(len(pool))])
    return " ".join(parts)[:LONG_CHARS].rsplit(" ", 1)[0]


async def churn_visitor(
    index: int, url: str, start: float, stop: asyncio.Event, outcomes: list[Outcome], timeout_s: float = 120.0
) -> int:
    """Visitors one after another in seat ``index`` until ``stop``; returns how many came."""
    rng = random.Random(index)
    came = 0
    while not stop.is_set():
        minute = int((time.monotonic() - start) // 60)
        text = churn_sentence(minute, rng.randrange(PER_MINUTE))
        how = rng.choice(["plain", "plain", "lens", "attr", "attention", "attention"])
        does = (
            AttentionBrowsing(text, rng)
            if how == "attention"
            else StepThrough(text, rng, {"lens": "&lens=1", "attr": "&attr=1"}.get(how, ""))
        )
        visitor = Visitor(url, timeout_s)
        came += 1
        try:
            outcome = await visitor.open(does.page, does.query)
            does.opened(visitor, outcome)
            outcomes.append(outcome)
            leave = time.monotonic() + rng.uniform(20, 90)
            while not outcome.fatal and not stop.is_set() and time.monotonic() < leave:
                try:
                    await asyncio.wait_for(stop.wait(), rng.uniform(2, 5))
                    break
                except asyncio.TimeoutError:
                    pass
                outcome = await does.act(visitor)
                outcomes.append(outcome)
        finally:
            await visitor.close()
        try:
            await asyncio.wait_for(stop.wait(), rng.uniform(1, 5))
        except asyncio.TimeoutError:
            pass
    return came


async def warm_up(url: str, kinds: list[StepThrough | AttentionBrowsing]) -> None:
    """One visit of each of ``kinds`` on :data:`WARM_TEXT`, one after another: opened, one action, closed."""
    for does in kinds:
        visitor = Visitor(url, 180)
        try:
            outcome = await visitor.open(does.page, does.query)
            does.opened(visitor, outcome)
            if not outcome.fatal:
                await does.act(visitor)
        finally:
            await visitor.close()


async def run_churn(
    url: str, visitors: int, minutes: float, ramp_s: float, settled: Callable[[str], None] = lambda _: None
) -> tuple[list[Outcome], int]:
    """``visitors`` seats of :func:`churn_visitor` for ``minutes``: ``(outcomes, visitors who came)``.

    First a warm-up: one Translate visit, then one of each other kind a churn visitor makes (the logit lens, the
    attribution view, the Attention page), each followed by ``settled(what was visited)`` once the server has had
    :data:`SETTLE_S` to hand its transient memory back; the last call comes before the first seat opens (where
    the soak reads its baseline). A page's first visit loads its code and torch's state for its kind of work
    (gradients for the attribution), which the process keeps whoever comes next: it is part of a warm server, not
    of what the churn costs."""
    rng = random.Random(0)
    await warm_up(url, [StepThrough(WARM_TEXT, rng)])
    await asyncio.sleep(SETTLE_S)
    settled("Translate")
    others = [StepThrough(WARM_TEXT, rng, "&lens=1"), StepThrough(WARM_TEXT, rng, "&attr=1")]
    await warm_up(url, [*others, AttentionBrowsing(WARM_TEXT, rng)])
    await asyncio.sleep(SETTLE_S)
    settled("every page")
    start, stop = time.monotonic(), asyncio.Event()
    outcomes: list[Outcome] = []

    async def seat(i: int) -> int:
        await asyncio.sleep(ramp_s * i / max(visitors, 1))
        return await churn_visitor(i, url, start, stop, outcomes)

    tasks = [asyncio.create_task(seat(i)) for i in range(visitors)]
    await asyncio.sleep(minutes * 60)
    stop.set()
    done, _ = await asyncio.wait(tasks, timeout=150)
    return outcomes, sum(t.result() for t in done if not t.exception())
