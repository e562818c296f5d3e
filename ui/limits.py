"""What a visitor may ask of the server, in one place: the hosted-demo switch and every cap that follows from it.

One switch, ``ATTENTION_EXPLORER_DEMO=1`` (``make serve`` / ``python -m deploy.serve --demo`` set it for every
worker), turns a lecture-room app into a public demo: shorter inputs, a smaller ablation sweep, no training runs
launched, stopped or deleted. It is read at each call (by :func:`launching.launch.demo_mode`, which the launcher
itself obeys too), never cached at import, so a test or a worker that sets it is seen at once. Pages ask
:func:`limits` for their caps instead of keeping their own numbers.
"""

from __future__ import annotations

from dataclasses import dataclass

from decoding.stepping import MAX_INPUT_CHARS
from launching.launch import DEMO_ENV, demo_mode

__all__ = [
    "DEMO_ENV",
    "DEMO_MAX_CHARS",
    "DEMO_TRAIN_TEXT_CHARS",
    "Limits",
    "TRAIN_TEXT_CHARS",
    "UPLOAD_MB",
    "demo_mode",
    "limits",
]

#: Characters of text a visitor of the hosted demo may send (a sentence or two).
DEMO_MAX_CHARS = 300
#: Characters of text the Tokenization page's small BPE trainer learns from: a few hundred sentences, trained in
#: well under a second, so one visitor's paste does not hold the heavy-work gate for the room.
TRAIN_TEXT_CHARS = 20_000
#: The same in the hosted demo: a paragraph or two (the default text, the presets, is about 400).
DEMO_TRAIN_TEXT_CHARS = 2_000
#: Megabytes of an uploaded training file (the Training page's own TSV): far more than the small runs it starts
#: read, far less than Streamlit's default 200 MB, which the server would hold in memory per upload.
UPLOAD_MB = 50


#: The work one ablation sweep may take on the page, in parameters × positions per scoring × scorings (about half
#: its floating-point operations): about 3 s on a 2-core CPU, which scores 1.6–2.6e10 of them per CPU-second at
#: MarianMT's and GPT-2's sizes. The shipped translator (31.0M parameters, 108 heads) sweeps every head of a
#: ten-word sentence within it; a 74M-parameter MarianMT needs twice it for the heads of one kind, so it sweeps one
#: layer's.
SWEEP_BUDGET = 1e11
#: The same in the hosted demo (``ATTENTION_EXPLORER_DEMO``), where visitors share the CPU.
DEMO_SWEEP_BUDGET = 4e10


@dataclass(frozen=True)
class Limits:
    """The caps in force for this server process.

    Attributes:
        demo: hosted-demo mode is on.
        max_chars: characters of a sentence, prompt or tokenizer text a page accepts (the model's own hard cap,
            :data:`decoding.stepping.MAX_INPUT_CHARS`, or :data:`DEMO_MAX_CHARS` in the demo).
        train_text_chars: characters of the Tokenization page's BPE training text (:data:`TRAIN_TEXT_CHARS`, or
            :data:`DEMO_TRAIN_TEXT_CHARS` in the demo); more is cut, with a note.
        upload_mb: megabytes of an uploaded file (:data:`UPLOAD_MB`).
        sweep_budget: the work one ablation sweep may take (:func:`app_pages.attention.views.sweep_plan`).
        training: runs may be launched, stopped and deleted from the Training page.
    """

    demo: bool
    max_chars: int
    sweep_budget: float
    training: bool
    train_text_chars: int = TRAIN_TEXT_CHARS
    upload_mb: int = UPLOAD_MB

    def too_long(self, text: str) -> str | None:
        """A sentence for the visitor when ``text`` is longer than :attr:`max_chars`, else ``None``."""
        if len(text) <= self.max_chars:
            return None
        where = "The hosted demo takes" if self.demo else "This page takes"
        return f"{where} up to {self.max_chars:,} characters (this text has {len(text):,}); please shorten it."


def limits() -> Limits:
    """The caps in force now (the environment is read at each call)."""
    demo = demo_mode()
    return Limits(
        demo=demo,
        max_chars=DEMO_MAX_CHARS if demo else MAX_INPUT_CHARS,
        sweep_budget=DEMO_SWEEP_BUDGET if demo else SWEEP_BUDGET,
        training=not demo,
        train_text_chars=DEMO_TRAIN_TEXT_CHARS if demo else TRAIN_TEXT_CHARS,
    )
