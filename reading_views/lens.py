"""The logit lens on the Translate page and in the Decoding lab: a toggle kept in the link (``?lens=1``), the lens of
the shown decoding computed once for every visitor, and its views.

The lens of a decoding (:func:`reading.lens.logit_lens`) is computed once per (checkpoint version, sentence, tokens
taken) through the gate for heavy work (:mod:`serving.heavy`) and shared, a frozen :class:`~reading.lens.Lens` of a few
kB; a step click only indexes into it. It is computed only once a visitor turns the lens on.
"""

from __future__ import annotations

import io
from typing import Sequence

import numpy as np
import streamlit as st

from decoding.decoded import Decoding
from model.checkpoint import Checkpoint
from reading.lens import Lens, LensStep, logit_lens
from serving import heavy
from ui import pieces, presentation, url, widgets
from ui.checkpoints import checkpoint_version
from ui.page_state import DECODING, TRANSLATE, Field
from viz.lens import lens_figure, lens_table_html, lens_table_svg

#: The link's parameter: ``?lens=1`` opens the lens on both pages.
PARAM = "lens"
LABEL = "Logit lens"
HELP = (
    "What each decoder layer would predict if the model stopped there: its residual stream read out by the "
    "model's own output layer. Shows when the answer forms."
)


def shared_lens(ckpt: Checkpoint, src_ids: Sequence[int], decoding: Decoding) -> Lens:
    """The lens of ``decoding`` (of ``src_ids``), computed once per checkpoint version and tokens, shared."""
    key = ("lens", *checkpoint_version(ckpt), tuple(src_ids), decoding.prefix, decoding.generated)
    return heavy.shared(
        key, lambda: logit_lens(ckpt.model, list(src_ids), decoding.prefix, decoding.generated), "the logit lens"
    )


def toggle(lens: Field) -> bool:
    """The "Logit lens" toggle (the page's declared ``lens``, e.g. ``TRANSLATE.lens``), seeded from ``?lens=`` and
    written back (off is left out)."""
    lens.init(lambda p: url.bool_param(p, PARAM, False, what="logit lens"))
    on = st.toggle(LABEL, key=lens.key, help=HELP)
    lens.put(on, False)
    return on


def readout_line(ckpt: Checkpoint, lens: Lens) -> str:
    """What the lens does to a layer's stream for this model, in one sentence (pre-LN or post-LN)."""
    cfg = ckpt.config
    projection = (
        "the output projection (the tied token embeddings"
        if cfg.tie_embeddings
        else "the output projection (the LM head"
    ) + (" plus its bias)" if cfg.logits_bias else ")")
    if lens.final_norm:
        how = (
            f"Pre-LN model: each layer's residual stream goes through the model's final LayerNorm, then "
            f"{projection}, then softmax."
        )
    else:
        how = (
            f"Post-LN model: every layer ends with its own LayerNorm, so its output is already normalised; the lens "
            f"applies only {projection}, then softmax."
        )
    return how + " At the last layer this is the model's own distribution."


def layer_labels(n_layers: int) -> list[str]:
    """``["1", …, "6 · output"]``: the last layer's readout is the model's output."""
    return [str(i + 1) for i in range(n_layers - 1)] + [f"{n_layers} · output"]


def _step_view(ckpt: Checkpoint, lens_step: LensStep, step: int, draw, **options) -> str:
    """``draw`` (:func:`viz.lens.lens_table_html` or :func:`~viz.lens.lens_table_svg`) of one step, pieces as the
    pages show them."""
    tok = ckpt.tokenizer
    n_layers = len(lens_step.chosen_probs)
    return draw(
        [str(i + 1) for i in range(n_layers)],
        [pieces.of_ids(tok, row) for row in lens_step.top_ids],
        lens_step.top_probs,
        [row.index(lens_step.token_id) if lens_step.token_id in row else None for row in lens_step.top_ids],
        lens_step.chosen_probs,
        lens_step.chosen_ranks,
        pieces.of_id(tok, lens_step.token_id),
        lens_step.first_top_layer,
        title=f"Step {step}: what each decoder layer would predict",
        **options,
    )


def step_html(ckpt: Checkpoint, lens_step: LensStep, step: int) -> str:
    """:func:`viz.lens.lens_table_html` of one step, pieces as the pages show them."""
    return _step_view(ckpt, lens_step, step, lens_table_html, large=presentation.is_on())


def step_svg(ckpt: Checkpoint, lens_step: LensStep, step: int) -> str:
    """:func:`viz.lens.lens_table_svg` of one step: the table as a picture to save."""
    return _step_view(ckpt, lens_step, step, lens_table_svg)


def lens_npz(ckpt: Checkpoint, lens: Lens) -> bytes:
    """The lens as a compressed ``.npz`` (bytes; ``np.load`` reads it without pickle), one row per step:
    ``top_ids`` int64 and ``top_probs`` float32 ``[steps, layers, k]``, ``chosen_probs`` float32 and
    ``chosen_ranks`` int64 ``[steps, layers]``, ``token_ids`` int64 and ``tokens`` (pieces) ``[steps]``,
    ``final_norm`` (bool: the final LayerNorm was applied to every layer)."""
    steps = lens.steps
    arrays = {
        "top_ids": np.array([s.top_ids for s in steps], dtype=np.int64).reshape(len(steps), lens.n_layers, -1),
        "top_probs": np.array([s.top_probs for s in steps], dtype=np.float32).reshape(len(steps), lens.n_layers, -1),
        "chosen_probs": np.array([s.chosen_probs for s in steps], dtype=np.float32).reshape(len(steps), -1),
        "chosen_ranks": np.array([s.chosen_ranks for s in steps], dtype=np.int64).reshape(len(steps), -1),
        "token_ids": np.array([s.token_id for s in steps], dtype=np.int64),
        "tokens": np.array(pieces.of_ids(ckpt.tokenizer, [s.token_id for s in steps]), dtype=str),
        "final_norm": np.array(lens.final_norm),
    }
    buffer = io.BytesIO()
    # numpy's stub lets any ``**`` name reach its ``allow_pickle: bool``; these names are the arrays' own
    np.savez_compressed(buffer, **arrays)  # type: ignore[arg-type]
    return buffer.getvalue()


def download(ckpt: Checkpoint, lens: Lens, key: str, where=None) -> None:
    """The lens of every step as ``.npz``, made when asked for (not at every click)."""
    (where or st).download_button(
        "Download the lens (.npz)",
        data=lambda: lens_npz(ckpt, lens),
        file_name="logit-lens.npz",
        mime="application/octet-stream",
        key=key,
        on_click="ignore",
        icon=":material/download:",
        help="Every step: each layer's top pieces (ids, probabilities) and the probability and rank of the token "
        "taken; load with numpy.load.",
    )


def translate_lens(ckpt: Checkpoint, src_ids: Sequence[int], run: Decoding, step: int) -> None:
    """The Translate page's toggle and, when on, the lens of ``step`` (drawn in the page's fragment, which the toggle
    reruns: :func:`app_pages.translate.translate.attention_view` says why not a fragment of its own)."""
    if not toggle(TRANSLATE.lens):
        return
    if step == 0:
        st.caption("Press **Next**: the lens shows what each decoder layer would predict at that step.")
        return
    lens = shared_lens(ckpt, src_ids, run)
    st.markdown(step_html(ckpt, lens.steps[step - 1], step), unsafe_allow_html=True)
    st.caption(readout_line(ckpt, lens))
    npz, svg = st.columns(2)
    download(ckpt, lens, TRANSLATE.lens.sub("export"), npz)
    svg.download_button(  # the page draws no chart whose camera button would save a picture
        "Download this step (.svg)",
        data=lambda: step_svg(ckpt, lens.steps[step - 1], step),
        file_name=f"logit-lens-step{step}.svg",
        mime="image/svg+xml",
        key=TRANSLATE.lens.sub("svg"),
        on_click="ignore",
        icon=":material/download:",
        help="The table above as an SVG picture.",
    )


def lab_lens(ckpt: Checkpoint, src_ids: Sequence[int], full: Decoding, step: int) -> None:
    """The Decoding lab's tab: the toggle and, when on, the lens of ``step`` of the lab's decoding (sampled or
    forced tokens included) and every step so far as a heatmap (its camera button saves SVG)."""
    if not toggle(DECODING.lens):
        st.caption(HELP + " Turn it on to compute it for this decoding.")
        return
    lens = shared_lens(ckpt, src_ids, full)
    tok = ckpt.tokenizer
    table, notes = st.columns([1, 1], gap="medium")
    table.markdown(step_html(ckpt, lens.steps[step - 1], step), unsafe_allow_html=True)
    notes.caption(readout_line(ckpt, lens))
    download(ckpt, lens, DECODING.lens.sub("export"), notes)
    so_far = lens.steps[:step]
    widgets.show_figure(
        lens_figure(
            np.array([s.chosen_probs for s in so_far]).T,
            [[pieces.of_id(tok, s.top_ids[layer][0]) for s in so_far] for layer in range(lens.n_layers)],
            [f"{i + 1} {pieces.of_id(tok, s.token_id)}" for i, s in enumerate(so_far)],
            layer_labels(lens.n_layers),
            title="Every step so far: p(token taken) at each layer; text = the layer's top guess",
        ),
        key="dl_chart_lens_map",
    )
