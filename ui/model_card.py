"""What a checkpoint's card tells the pages: the sidebar's one-line summary, whose weights run, how good a
translator is, and the layer the attention views open on. Pure functions of a :class:`model.checkpoint.Checkpoint`
(its ``card`` dict and ``config``); no Streamlit here."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TypeGuard

from model.checkpoint import Checkpoint
from viz.labels import parameters_text


def card_summary(ckpt: Checkpoint) -> str:
    """One line about the model for the sidebar: its shape, and how it was trained and scored (ours) or where it
    came from (a Hugging Face folder: its authors trained it; no scores were measured here)."""
    card, cfg = ckpt.card, ckpt.config
    parts = [
        f"{cfg.arch}, d_model {cfg.d_model}, {cfg.n_heads} heads, {cfg.n_encoder_layers}+{cfg.n_decoder_layers} layers"
    ]
    if card.get("model_type"):  # a Hugging Face folder (model.hf.card)
        parts.insert(0, f"{card.get('source')}: {card.get('origin')}")
        parts.append(f"{parameters_text(int(card.get('parameters') or 0))} parameters")
        if card.get("license"):
            parts.append(f"licence {card['license']}")
        parts.append("run by this project's Transformer code")
        return " · ".join(parts)
    if card.get("hardware"):
        parts.append(f"trained {training_time(card, '.1f') or '? min'} in all on {card['hardware']}")
    test = card.get("test")
    if isinstance(test, dict) and "bleu" in test and "chrf" in test:
        parts.append(f"test BLEU {test['bleu']:.1f} · chrF {test['chrf']:.1f}")
    elif isinstance(test, dict) and "perplexity" in test:  # a language model
        parts.append(f"test perplexity {test['perplexity']:.1f}")
    return " · ".join(parts)


def opening_layer(card: Mapping, n_layers: int) -> int:
    """The 0-based layer a page opens on, for an attention kind with ``n_layers`` layers: ``card``'s
    ``open_layer`` (counted from 1, as the pages show layers) when it names a layer the kind has, else the last.

    A card names one when the last layer's attention shows least: the CPU-trained 6 + 6 translator (shipped until
    2026-11-26) put most of its last decoder layer's cross-attention on the source's final pieces, while its layer
    3 lined the German pieces up with the English ones (the en-de model card, CPU lineage). A link's ``?layer=``
    still wins.
    """
    value = card.get("open_layer")
    if isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= n_layers:
        return value - 1
    return n_layers - 1


def minutes_unit(card: Mapping) -> str:
    """What the card's training minutes are: ``"GPU-minutes"`` for a model trained on a GPU (its ``device`` is
    ``cuda…``), else ``"CPU-minutes"``. A GPU minute did what ~100 of this project's CPU minutes do, so the two are
    never shown under one name."""
    return "GPU-minutes" if str(card.get("device", "")).startswith("cuda") else "CPU-minutes"


def training_time(card: Mapping, fmt: str = ".0f") -> str | None:
    """How long the card's model trained, each machine's minutes under its own name: ``"8 GPU-minutes"``, or for a
    GPU run continued on the CPU (the card's ``cpu_minutes``) ``"8 GPU-minutes and 89 CPU-minutes"``; ``None``
    when the card gives no minutes. ``fmt`` formats the numbers."""

    def number(value) -> TypeGuard[int | float]:
        return isinstance(value, (int, float)) and not isinstance(value, bool)

    minutes = (card.get("total") or {}).get("train_minutes", card.get("train_minutes"))
    if not number(minutes):
        return None
    unit = minutes_unit(card)
    text = f"{minutes:{fmt}} {unit}"
    cpu = card.get("cpu_minutes")
    if unit == "GPU-minutes" and number(cpu) and cpu > 0:
        text += f" and {cpu:{fmt}} CPU-minutes"
    return text


def who_computes(ckpt: Checkpoint) -> str:
    """Whose model the page runs, for a caption: ``"our own Transformer"``, or for a Hugging Face folder
    ``"Helsinki-NLP/opus-mt-en-de's weights (Hugging Face) run by our own Transformer code"``."""
    if ckpt.card.get("model_type"):
        return f"{ckpt.card.get('source')}'s weights (Hugging Face) run by our own Transformer code"
    return "our own Transformer"


def quality_line(ckpt: Checkpoint) -> str | None:
    """One plain sentence on how good a translator is, from its card's measured scores (``None`` when the card
    has none), so that a visitor is not misled by a confident-looking output. The card's ``test`` names its own
    set (``split``); a card without one is the Ding lineage's."""
    card = ckpt.card
    test, everyday = card.get("test"), card.get("everyday")
    if not (ckpt.config.is_encoder_decoder and isinstance(test, dict) and "chrf" in test and "bleu" in test):
        return None
    time = training_time(card)
    where = f"trained {time}" if time else "small"
    split = str(test.get("split") or "Ding test")
    split = "Ding test" if split.startswith("Ding test") else split
    line = f"A small model ({where}): {split} BLEU {test['bleu']:.1f}, chrF {test['chrf']:.1f}"
    if isinstance(everyday, dict) and "chrf" in everyday:
        line += f"; everyday sentences chrF {everyday['chrf']:.1f}"
        if everyday["chrf"] >= 60:
            return line + ". Expect mistakes on rare words, names and long sentences."
    return line + ". Expect mistakes: its German is often wrong after the first words."
