"""What a visitor may ask of the server, in one place: the hosted-demo switch and every cap that follows from it.

One switch, ``ATTENTION_EXPLORER_DEMO=1`` (``make serve`` / ``python -m deploy.serve --demo`` set it for every
worker), turns a lecture-room app into a public demo: shorter inputs, a smaller ablation sweep, no training runs
launched, stopped or deleted. It is read at each call (by :func:`training.launch.demo_mode`, which the launcher
itself obeys too), never cached at import, so a test or a worker that sets it is seen at once. Pages ask
:func:`limits` for their caps instead of keeping their own numbers.
"""

from __future__ import annotations

from dataclasses import dataclass

from model.decoding import MAX_INPUT_CHARS
from training.launch import DEMO_ENV, demo_mode
from ui import attention_views

__all__ = ["DEMO_ENV", "DEMO_MAX_CHARS", "Limits", "demo_mode", "limits"]

#: Characters of text a visitor of the hosted demo may send (a sentence or two).
DEMO_MAX_CHARS = 300


@dataclass(frozen=True)
class Limits:
    """The caps in force for this server process.

    Attributes:
        demo: hosted-demo mode is on.
        max_chars: characters of a sentence, prompt or tokenizer text a page accepts (the model's own hard cap,
            :data:`model.decoding.MAX_INPUT_CHARS`, or :data:`DEMO_MAX_CHARS` in the demo).
        sweep_budget: the work one ablation sweep may take (:func:`ui.attention_views.sweep_plan`).
        training: runs may be launched, stopped and deleted from the Training page.
    """

    demo: bool
    max_chars: int
    sweep_budget: float
    training: bool

    def too_long(self, text: str) -> str | None:
        """A sentence for the visitor when ``text`` is longer than :attr:`max_chars`, else ``None``."""
        if len(text) <= self.max_chars:
            return None
        where = "The hosted demo takes" if self.demo else "This page takes"
        return f"{where} up to {self.max_chars:,} characters (this text has {len(text):,}); please shorten it."


def limits() -> Limits:
    """The caps in force now (the environment is read at each call)."""
    demo = demo_mode()
    return Limits(demo=demo, max_chars=DEMO_MAX_CHARS if demo else MAX_INPUT_CHARS,
                  sweep_budget=attention_views.DEMO_SWEEP_BUDGET if demo else attention_views.SWEEP_BUDGET,
                  training=not demo)
