"""What the visitors of :mod:`benchmarks.chaos` do: a real room's impatience, leaving and hostile links.

* **double**: Translate on a sentence of its own (a first decoding), with the attribution view (``?attr=1``: each
  step's attribution is heavy work), the logit lens (``?lens=1``) or neither, clicking Next or Back twice within
  :data:`GAP_S` seconds; every fifth action is one plain click. After a double click the page must show the step
  two clicks further, or one further where a single run served both (Streamlit folds two clicks on one button that
  arrive before their run starts into one run, as it does for a browser's; counted as ``merged`` once no second run
  has come for :data:`LATE_WAIT_S` seconds), after a plain click one further: anything else is a lost step
  (``mismatch``; :func:`verdict`);
* **sweep**: the Attention page's Ablation tab on a new sentence, double-clicking *Sweep …* (every head ablated
  in turn, the heaviest work a visitor can start), then leaving for the next sentence;
* **leaver**: opens Translate or the Attention page on a new sentence (heavy work starts at once) or clicks Next
  with the attribution view on, and closes the websocket before the run ends;
* **hostile**: opens a page with a link from :func:`hostile_query`: huge and negative numbers, ``<script>``,
  unknown names and choices, 10,000 characters; the page must finish its run without an exception.
"""

from __future__ import annotations

import asyncio
import random
import time
from urllib.parse import urlencode

from benchmarks.load_client import Outcome, Visitor
from benchmarks.load_scenarios import demo_sentences
from ui.page_state import APP, PAGES

KINDS = ("double", "double", "double", "double", "sweep", "leaver", "hostile")
#: Seconds between the two clicks of a double click (under 50 ms: a double click, not two decisions).
GAP_S = 0.03
#: Seconds of silence after a double click served by one run before it counts as merged rather than as a second
#: run still to come. A busy server starts the second click's run seconds later (the first run's heavy work, the
#: GIL shared with other sessions' computations); read too soon, a late run looked like a lost step.
LATE_WAIT_S = 15.0
#: The link parameters each page reads (``docs/url-parameters.md``), hostile values for every one.
#: Each page's link parameters, as the pages declare them (ui.page_state), with the shared ones (the sentence, the
#: checkpoint, presentation mode); the page's path ("" for Translate, the default page) → names.
PAGE_PARAMS = {
    ("" if page.page == "translate" else page.page): list(
        dict.fromkeys(n for p in (APP, page) for f in p.fields() for n in f.link_params())
    )
    for page in PAGES
    if page is not APP
}
HOSTILE_VALUES = (
    "<script>alert(1)</script>",
    "-99999999999999999999",
    "9" * 400,
    "1e309",
    "-1",
    "nan",
    "x" * 10_000,
    "</div><img src=x onerror=alert(1)>",
    "\u202e\u0000",
    "",
)
UNKNOWN_NAMES = ("foo", "__proto__", "step[]", "<b>")


def hostile_query(rng: random.Random) -> tuple[str, str]:
    """``(page, query string)``: one page, a few of its parameters with hostile values, an unknown name."""
    page = rng.choice(list(PAGE_PARAMS))
    names = rng.sample(PAGE_PARAMS[page], k=min(len(PAGE_PARAMS[page]), rng.randint(1, 4)))
    pairs = [(n, rng.choice(HOSTILE_VALUES)) for n in names] + [(rng.choice(UNKNOWN_NAMES), rng.choice(HOSTILE_VALUES))]
    return page, urlencode(pairs)


class Tally:
    """Counts the run keeps across visitors: double clicks, merged ones, second runs read late, departures,
    hostile links."""

    def __init__(self) -> None:
        self.double_clicks = self.merged = self.late = self.left = self.hostile = self.sweeps = 0


def verdict(shown: int, expected: int, direction: int, total: int, single: bool, one_run: bool) -> str:
    """What the step a page shows after a click says, with ``expected`` the step before it, ``direction`` +1 (Next)
    or -1 (Back), ``total`` the last step and ``one_run`` whether a single run served the click(s):

    * ``"ok"``: the step every click leads to (clamped to ``[0, total]``);
    * ``"one short"``: a double click served by one run, one step on: Streamlit merged the two clicks, or the
      second click's run is still to come (wait, then read it again);
    * ``"lost"``: anything else, among it a double click served by two runs, or one cut short by the second,
      that moved one step: a click whose run came and did not count.
    """
    step = lambda k: min(max(expected + direction * k, 0), total)  # noqa: E731
    target = step(1 if single else 2)
    if shown == target:
        return "ok"
    if not single and one_run and shown == step(1):
        return "one short"
    return "lost"


class Chaos:
    """One chaos visitor: ``kind`` from :data:`KINDS`, its own sentences (``index`` picks where it starts)."""

    def __init__(self, kind: str, index: int, seed: int, tally: Tally):
        self.kind, self.tally = kind, tally
        self.rng = random.Random(seed * 100_003 + index)
        sentences = demo_sentences()
        self.sentences = sentences[(index * 37 + seed) % len(sentences) :] + sentences
        self.view_param = ("&attr=1", "&lens=1", "", "")[index % 4]
        self.expected, self.total, self.direction, self.acted = 0, 0, 1, 0  # total: the page's steps, once open
        # the step the clicks lead to; the page one step short of it for now, at short_of
        self.target, self.short, self.short_of = 0, False, 0

    def sentence(self) -> str:
        self.sentences.append(self.sentences.pop(0))
        return self.sentences[0]

    # --- a visit ------------------------------------------------------------------------------------------------
    async def visit(self, url: str, timeout_s: float, stop: asyncio.Event, record) -> bool:
        """One visit of this visitor's kind, its outcomes passed to ``record``; False when the session was lost
        (a disconnect or timeout: the caller starts a new one)."""
        visitor = Visitor(url, timeout_s)
        try:
            if self.kind == "hostile":
                page, query = hostile_query(self.rng)
                outcome = await visitor.open(page, query)
                outcome.action = f"hostile /{page}"
                self.tally.hostile += 1
                record(outcome)
                return not outcome.fatal
            if self.kind == "leaver":
                await self._leave(visitor)
                return True
            if self.kind == "sweep":
                return await self._sweep(visitor, record)
            return await self._double(visitor, timeout_s, stop, record)
        finally:
            await visitor.close()

    async def _leave(self, visitor: Visitor) -> None:
        """Start heavy work and close the websocket before it ends."""
        text = self.sentence()
        how = self.rng.choice(["translate", "attention", "attr-next"])
        if how == "attr-next":
            outcome = await visitor.open("", urlencode({"text": text, "attr": 1}))
            if outcome.fatal:
                return
            action = visitor.click("Next")
        else:
            action = visitor.open("attention" if how == "attention" else "", urlencode({"text": text}))
        task = asyncio.ensure_future(action)
        await asyncio.wait({task}, timeout=self.rng.uniform(0.02, 0.6))
        task.cancel()
        try:
            await task
        except (asyncio.CancelledError, Exception):  # whatever the half-read run raised: we left
            pass
        self.tally.left += 1

    async def _sweep(self, visitor: Visitor, record) -> bool:
        outcome = await visitor.open("attention", urlencode({"text": self.sentence(), "tab": "Ablation"}))
        record(outcome)
        button = next(
            (w for w in visitor.view.widgets.values() if w.kind == "button" and w.label.startswith("Sweep")), None
        )
        if outcome.fatal or button is None:
            return not outcome.fatal
        outcome = await visitor.double_click(button.label, GAP_S)
        self.tally.double_clicks += 1
        self.tally.sweeps += 1
        if outcome.seconds is not None and "sweep=1" not in visitor.view.query_string:
            outcome.errors.append("mismatch")
            outcome.detail += f"; swept, but the link says {visitor.view.query_string[:120]!r}"
        record(outcome)
        return not outcome.fatal

    async def _double(self, visitor: Visitor, timeout_s: float, stop: asyncio.Event, record) -> bool:
        """Translate on a new sentence, stepping with double clicks until ``stop`` (or a lost session)."""
        outcome = await visitor.open("", f"{urlencode({'text': self.sentence()})}{self.view_param}")
        record(outcome)
        if outcome.fatal or visitor.view.step is None:
            return not outcome.fatal
        self.expected, self.total, self.direction = 0, visitor.view.step[1], 1
        self.target, self.short, self.short_of = 0, False, 0
        while not stop.is_set():
            await asyncio.sleep(self.rng.uniform(0.2, 1.2))
            if not await self._caught_up(visitor, record):
                return True
            if not 0 <= self.expected + self.direction <= self.total:
                self.direction = -self.direction
            label = "Next" if self.direction > 0 else "Back"
            self.acted += 1
            single = self.acted % 5 == 0
            outcome = await (visitor.click(label) if single else visitor.double_click(label, GAP_S))
            if not single:
                self.tally.double_clicks += 1
            if outcome.seconds is not None:
                self._check(visitor, outcome, single)
            record(outcome)
            if outcome.fatal:
                return False
            if outcome.errors:  # the page is not what this visitor's clicks make it: start again
                return True
            if self.rng.random() < 0.05:  # now and then a new sentence: a new first decoding
                return await self._caught_up(visitor, record) or True
        await self._caught_up(visitor, record)
        return True

    async def _caught_up(self, visitor: Visitor, record) -> bool:
        """Read the runs the last action started late (:meth:`_late`); False after a lost step."""
        steps = [w for w in visitor.view.widgets.values() if w.kind == "button" and w.label in ("Next", "Back")]
        wait_s = LATE_WAIT_S if self.short else 0.01
        late = await visitor.drain(steps[0].fragment_id if steps else "", wait_s=wait_s)
        return self._late(visitor, record, late) if late or self.short else True

    def _late(self, visitor: Visitor, record, late: int) -> bool:
        """Runs read late, after the last action's run: the second click's own run (a busy server can start it
        more than :meth:`~benchmarks.load_client.Visitor.double_click`'s wait later), or a fragment rerun Streamlit
        queues after serving a click. Either way the page must now show the step every click leads to; a double
        click one step short with no late run in :data:`LATE_WAIT_S` s was merged by Streamlit into one run."""
        shown = visitor.view.step
        if self.short and not late and shown == (self.short_of, self.total):
            self.tally.merged += 1
            self.expected, self.target, self.short = self.short_of, self.short_of, False
            return True
        if shown == (self.target, self.total):
            self.tally.late += self.short
            self.expected, self.short = self.target, False
            return True
        record(
            Outcome(
                "late run",
                0.0,
                ["mismatch"],
                f"after {late} late run(s), the page shows {shown}, expected step {self.target}"
                f" (session {visitor.view.session_id}, {time.time():.3f})",
            )
        )
        self.short = False
        return False

    def _check(self, visitor: Visitor, outcome: Outcome, single: bool) -> None:
        """Every click counts (:func:`verdict`): the page must show the step one click further after a plain click,
        two after a double click. A double click served by one run whose page is one step short may still get its
        second click's run late, or have been merged (read before the next action, :meth:`_late`)."""
        shown = visitor.view.step
        step = lambda k: min(max(self.expected + self.direction * k, 0), self.total)  # noqa: E731
        self.target, self.short_of = step(1 if single else 2), step(1)
        seen = shown[0] if shown is not None and shown[1] == self.total else -1
        said = verdict(seen, self.expected, self.direction, self.total, single, outcome.merged)
        self.short = said == "one short"
        if said == "ok":
            self.expected = self.target
        elif said == "lost":
            outcome.errors.append("mismatch")
            outcome.detail += (
                f"; expected step {self.target} of {self.total}, the page shows {shown}"
                f" (session {visitor.view.session_id}, {time.time():.3f})"
            )
