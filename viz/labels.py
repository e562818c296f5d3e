"""The words every page shows for the model's plain identifiers: attention kinds, heads, the word-start marker.

``model/`` names the attention kinds ``encoder``, ``decoder``, ``cross`` and ``self``
(:data:`model.config.ENCODER_DECODER_KINDS`, :data:`model.config.DECODER_ONLY_KINDS`); how they read on a page is
defined here, once. No Streamlit, no model.
"""

from __future__ import annotations

#: Chart titles, one per attention kind.
KIND_TITLES = {
    "encoder": "Encoder self-attention",
    "decoder": "Decoder masked self-attention",
    "cross": "Cross-attention (decoder → encoder)",
    "self": "Masked self-attention",
}
#: Short names for pickers, captions and small charts.
KIND_SHORT = {
    "encoder": "Encoder self",
    "decoder": "Decoder self (masked)",
    "cross": "Cross (decoder → encoder)",
    "self": "Self (masked)",
}

#: How word starts are shown: a piece is shown as the tokenizer stores it, ``▁`` marking a word start (the space
#: before the word). Every page uses this one convention (:func:`viz.attention.display_token`).
WORD_START_NOTE = (
    "`▁` marks a piece that starts a word (it stands for the space before it); a piece without it "
    "continues the word before."
)
#: The same for each kind of tokenizer (``tok.kind``): GPT-2's byte-level pieces are shown readably, its ``Ġ``
#: (a leading space) as ``␣``.
WORD_START_NOTES = {
    "bpe": WORD_START_NOTE,
    "unigram": WORD_START_NOTE,
    "byte-bpe": (
        "`␣` marks a piece that starts with a space, so a new word (GPT-2 stores it as `Ġ`); a piece "
        "without it continues the word before, or starts the text. Pieces are shown as the text they "
        "stand for (GPT-2 stores `ü` as the two bytes `Ã¼`); `<0xF0>` is a byte that is only part of a "
        "character."
    ),
}


def word_start_note(kind: str) -> str:
    """The sentence that explains how pieces and word starts are shown, for a tokenizer of ``kind`` (``"bpe"``,
    ``"unigram"``, ``"byte-bpe"``; another kind gets :data:`WORD_START_NOTE`)."""
    return WORD_START_NOTES.get(kind, WORD_START_NOTE)


def kind_note(kind: str, q_len: int, k_len: int, translation: bool = True) -> str:
    """One sentence on who attends to whom in ``kind`` (``q_len`` queries × ``k_len`` keys).

    ``translation``: the model reads English and writes German (an encoder-decoder); otherwise "pieces".
    """
    source, target = ("English", "German") if translation else ("", "")
    notes = {
        "encoder": f"Every {source} piece attends to every {source} piece (no mask).",
        "decoder": f"Each {target} input piece attends to itself and the pieces before it; the grey upper triangle "
        "is masked (the future is hidden).",
        "cross": f"Each {target} input piece (a query; it predicts the next token) attends to the {source} pieces "
        f"(keys and values come from the encoder output, the memory). Lengths may differ: {q_len} × {k_len}.",
        "self": "Each piece attends to itself and the pieces before it.",
    }
    return " ".join(notes.get(kind, kind).split())


def head_name(head: int | str) -> str:
    """``2`` (0-based) → ``"head 3"``; ``"mean"`` → ``"mean over heads"``; ``"all"`` → ``"all heads"``."""
    if isinstance(head, str):
        return {"all": "all heads", "mean": "mean over heads"}.get(head, head)
    return f"head {head + 1}"


def view_title(kind: str, layer: int, head: int | str, words: bool = False, short: bool = False) -> str:
    """``"Cross-attention (decoder → encoder) · layer 2 · head 3"`` (0-based ``layer`` / ``head``), with
    ``" · words"`` at word level; ``short`` uses :data:`KIND_SHORT`."""
    kind_text = (KIND_SHORT if short else KIND_TITLES).get(kind, kind)
    return f"{kind_text} · layer {layer + 1} · {head_name(head)}" + (" · words" if words else "")


def end_sentence(text: str) -> str:
    """``text`` ending in exactly one full stop: ``"… saß auf der Matte."`` stays, ``"checkpoint b"`` gets ``"."``.

    Text that already ends in ``.``, ``!``, ``?`` or ``…`` (possibly followed by a closing quote or bracket) is
    left as it is, so that a caption that ends with a quoted sentence shows no doubled stop.
    """
    text = text.rstrip()
    return text if text.rstrip("”\"’')»]").endswith((".", "!", "?", "…")) else text + "."


def parameters_text(n: int) -> str:
    """A parameter count as a page writes it: ``74_410_496`` → ``"74M"``, ``7_600_000`` → ``"7.6M"``, ``13_499`` →
    ``"13,499"``."""
    if n >= 10_000_000:
        return f"{n / 1e6:.0f}M"
    return f"{n / 1e6:.1f}M" if n >= 1_000_000 else f"{n:,}"
