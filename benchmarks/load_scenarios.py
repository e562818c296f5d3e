"""What each simulated visitor of :mod:`benchmarks.load` does, scenario by scenario, and how it checks that the
page it is shown follows its own clicks only (a session leaking into another would show as a ``mismatch``).

* **lecture**: Translate on the lecturer's sentence, stepping Next to the last step, then Back to step 0, and again
  (the clicks never stop); after each click the page must show ``Step k`` for the k this visitor's clicks reach;
* **demo**: the same, each visitor with a sentence of its own (:func:`demo_sentences`);
* **burst**: the demo when a lecturer says "open this link now and type your own sentence": by default 100 visitors
  with sentences of their own arriving within 5 s (:data:`SCENARIO_DEFAULTS`), every first page a new decoding;
* **attention**: the Attention page, a random layer, head, attention kind or tab each time; the link the server
  writes back must hold the layer, head and kind this visitor chose;
* **lens**: the lecture with the logit lens on (``?lens=1``): every step also draws what each decoder layer would
  predict, from the lens computed once for the sentence;
* **attribution**: the lecture with the attribution view on (``?attr=1``): every step also reads attention beside
  gradient attribution and its faithfulness, computed once per step and sentence for the room (heavy work);
* **mixed**: lecture, demo and attention in turn (visitor 0 lecture, 1 demo, 2 attention, 3 lecture…).
"""

from __future__ import annotations

import random
import re
from typing import TypedDict
from urllib.parse import parse_qs, quote_plus

from benchmarks.load_client import Outcome, Visitor
from viz.labels import KIND_SHORT, KIND_TITLES

SCENARIOS = ("lecture", "demo", "attention", "lens", "attribution", "burst")


class ScenarioDefaults(TypedDict, total=False):
    """A scenario's own ``levels`` (cumulative visitors) and ``ramp_s`` (seconds per level)."""

    levels: list[int]
    ramp_s: float


#: A scenario's own visitor levels and ramp (seconds), where the command line gives none.
SCENARIO_DEFAULTS: dict[str, ScenarioDefaults] = {"burst": {"levels": [100], "ramp_s": 5.0}}
#: What ``mixed`` interleaves.
MIXED = ("lecture", "demo", "attention")
LECTURE_TEXT = "My brother lives in Berlin."
#: Tabs a visitor browses on the Attention page (Ablation and Compare start experiments instead of showing one).
ATTENTION_TABS = ("Heads", "Tokens & lines", "Query · key", "Model grid", "Summaries", "Head statistics")
KIND_OF_LABEL = {label: kind for kind, label in KIND_SHORT.items()}  # the radio's label → ?kind=


def demo_sentences() -> list[str]:
    """Four hundred distinct plain English sentences ("My sister lives in Hamburg."), in a fixed order."""
    people = [
        "My sister",
        "My brother",
        "My friend",
        "Our teacher",
        "The doctor",
        "Her father",
        "His mother",
        "The old man",
        "A young woman",
        "Our neighbour",
    ]
    verbs = ["lives in", "works in", "is travelling to", "was born in"]
    cities = ["Hamburg", "Berlin", "Munich", "Vienna", "Paris", "London", "Rome", "Zurich", "Cologne", "Madrid"]
    return [f"{p} {v} {c}." for c in cities for p in people for v in verbs]


# --- what a visitor does ----------------------------------------------------------------------------------------
class StepThrough:
    """Translate on ``text``: Next up to the last step, Back down to step 0, and again. After every click the page
    must show ``Step k of N`` with this visitor's k and the N of its first load."""

    page = ""

    def __init__(self, text: str, rng: random.Random, extra: str = ""):
        self.query = f"text={quote_plus(text)}{extra}"  # extra: more link parameters ("&lens=1")
        self.expected, self.direction = 0, 1
        self.total: int | None = None

    def opened(self, visitor: Visitor, outcome: Outcome) -> None:
        self.expected, self.direction = 0, 1
        self.total = visitor.view.step[1] if visitor.view.step else None
        self._check(visitor, outcome)

    async def act(self, visitor: Visitor) -> Outcome:
        if not 0 <= self.expected + self.direction <= (self.total or 0):
            self.direction = -self.direction
        outcome = await visitor.click("Next" if self.direction > 0 else "Back")
        if outcome.seconds is not None:
            self.expected += self.direction
            self._check(visitor, outcome)
        return outcome

    def _check(self, visitor: Visitor, outcome: Outcome) -> None:
        shown = visitor.view.step
        if outcome.seconds is not None and (shown is None or shown != (self.expected, self.total)):
            outcome.errors.append("mismatch")
            outcome.detail = f"expected step {self.expected} of {self.total}, the page shows {shown}"


class AttentionBrowsing:
    """The Attention page on ``text``: each action picks a random layer, head, attention kind or tab (another than
    the current one). After a layer, head or kind, the link the server writes back must hold that choice."""

    page = "attention"

    def __init__(self, text: str, rng: random.Random):
        self.query, self.rng = f"text={quote_plus(text)}", rng

    def opened(self, visitor: Visitor, outcome: Outcome) -> None:
        pass

    async def act(self, visitor: Visitor) -> Outcome:
        what = self.rng.choice(["Layer", "Head", "Attention", "tab"])
        view = visitor.view
        widget = (
            next((w for w in view.widgets.values() if w.kind == "tabs"), None) if what == "tab" else view.find(what)
        )
        if widget is None:
            return Outcome(what.lower(), None, ["no widget"], f"no {what} widget on the Attention page")
        current = view.values.get(widget.id, (None, None))[1]
        option = self.rng.choice([o for o in widget.options if o != current and (what != "tab" or o in ATTENTION_TABS)])
        outcome = await visitor.choose(widget, option, action=what.lower())
        if outcome.seconds is None or what == "tab":
            return outcome
        # the link's value for the option shown: "layer 3" → layer=3, "head 2" → head=2, "all heads" → head=all;
        # a default is left out of the link, and then the page's charts must show it
        param, wanted = {
            "Layer": ("layer", re.sub(r"\D", "", option)),
            "Head": ("head", re.sub(r"\D", "", option) or option.split()[0]),
            "Attention": ("kind", KIND_OF_LABEL.get(option)),
        }[what]
        in_link = parse_qs(view.query_string).get(param, [None])[0]
        # all: head 1 first
        head = {"mean": "· mean over heads", "all": "· head 1"}.get(wanted or "", f"· head {wanted}")
        drawn = {"Layer": f"· layer {wanted} ·", "Head": head, "Attention": KIND_TITLES.get(wanted or "", "?")}[what]
        # the heatmaps' titles name kind, layer and head ("Cross-attention (decoder → encoder) · layer 2 · head 3");
        # a tab without them (Head statistics…) leaves only the link to check
        titles = [" ".join(t.replace("<br>", " ").split()) for t in view.titles]  # a long title is wrapped
        maps = [t for t in titles if t.startswith(tuple(KIND_TITLES.values())) and " · layer " in t]
        on_charts = not maps or any(re.search(re.escape(drawn) + r"(?!\d)", t) for t in maps)  # head 1, not 12
        if in_link not in (wanted, None) or not on_charts:
            outcome.errors.append("mismatch")
            outcome.detail = f"chose {option!r}: the link says {param}={in_link!r}, the charts {view.titles[:2]}"
        return outcome


def behaviour(scenario: str, index: int, seed: int) -> StepThrough | AttentionBrowsing:
    """What visitor ``index`` does in ``scenario`` (mixed: :data:`MIXED` in turn)."""
    rng = random.Random(seed * 100_003 + index)
    if scenario == "mixed":
        scenario = MIXED[index % len(MIXED)]
    sentences = demo_sentences()
    own = sentences[(index * 37 + seed) % len(sentences)]  # 37 is prime to 400: neighbours get far-apart sentences
    if scenario in ("lecture", "lens", "attribution"):
        return StepThrough(LECTURE_TEXT, rng, {"lens": "&lens=1", "attribution": "&attr=1"}.get(scenario, ""))
    return StepThrough(own, rng) if scenario in ("demo", "burst") else AttentionBrowsing(own, rng)
