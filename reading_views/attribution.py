"""Attention vs attribution on the Translate page and in the Decoding lab: a toggle kept in the link (``?attr=1``)
and, for the step on screen, every method's share of each source and prefix piece on one scale, the integrated
gradients' completeness gap, the source's share of the prediction, and how faithful each method is (ERASER).

What the view shows is computed once per step and shared, the next steps ahead of the room
(:mod:`reading_views.step_attribution`); its arrays and download are :mod:`reading_views.attribution_scores`.
"""

from __future__ import annotations

from typing import NamedTuple, Sequence

import numpy as np
import streamlit as st

from charts.attribution import attribution_html, attribution_svg, share_line_svg
from decoding.decoded import Decoding
from model.checkpoint import Checkpoint
from reading.attribution import METHODS, StepAttribution
from reading.faithfulness import Faithfulness
from reading.gradients import MAX_STEPS, TOLERANCE
from reading_views import whatif as whatif_view
from reading_views.attribution_scores import attribution_npz, share_matrices
from reading_views.step_attribution import prefetch_after, shared_attribution, shared_faithfulness, step_inputs
from serving import figures
from ui import pieces, presentation, url, widgets
from ui.page_state import DECODING, TRANSLATE, Field

#: The link's parameters: ``?attr=1`` opens the view; the method followed, the attention methods' layer and head
#: (1-based, or ``mean``) and integrated gradients' points.
PARAM, METHOD, LAYER, HEAD, STEPS = "attr", "attr_method", "attr_layer", "attr_head", "attr_steps"
LABEL = "Attention vs attribution"
HELP = (
    "For the step on screen: how much each source and prefix piece counts, by raw attention, by attention times "
    "the size of what it moves (‖α·f(x)‖), by gradient × input and by integrated gradients, on one scale; and "
    "which of them the model bears out when the pieces are masked."
)
#: How the page names each method (the rows of the grid).
NAMES = {
    "attention": "attention α",
    "value_norm": "‖α·f(x)‖",
    "grad_x_input": "gradient × input",
    "integrated_gradients": "integrated gradients",
}
DEFAULT_METHOD = "integrated_gradients"
#: Integration points offered: the default, and more where the gap is large (each costs proportionally more).
STEP_CHOICES = (24, 64, 128)
#: How the faithfulness table writes its numbers.
FAITH_FORMATS = {"comprehensiveness ↑": "{:.3f}", "sufficiency ↓": "{:.3f}"}
FAITHFUL_NOTE = (
    "**Faithfulness** (ERASER, DeYoung et al. 2020): mask with `<unk>` the source pieces a method ranks "
    "highest (its top 10 %, 20 %, 50 %). *Comprehensiveness* is how much p(token) drops when they are "
    "masked (higher: the method found what the prediction needed); *sufficiency* how much it drops when "
    "only they are left (lower: they suffice). Each is averaged over the three sizes (AOPC), beside "
    "random rankings. How each method and measure is computed: docs/attribution.md."
)


class Keys(NamedTuple):
    """One page's session keys of the view, derived from its declared family (:mod:`ui.page_state`)."""

    toggle: str
    method: str
    layer: str
    head: str
    steps: str
    line: str  #: the line over the steps was asked for
    line_button: str
    export: str
    svg: str
    whatif: str  #: the what-if's toggle, its word and its replacement (:mod:`reading_views.whatif`)
    word: str
    replacement: str

    @classmethod
    def of(cls, attr: Field) -> "Keys":
        """The keys a page's declared family (``TRANSLATE.attr``: ``tr_attr``, ``tr_attr_method``, …) derives."""
        return cls(
            attr.key,
            *(
                attr.sub(name)
                for name in (
                    "method",
                    "layer",
                    "head",
                    "steps",
                    "line",
                    "line_button",
                    "export",
                    "svg",
                    "whatif",
                    "word",
                    "with",
                )
            ),
        )


TRANSLATE_KEYS = Keys.of(TRANSLATE.attr)
LAB_KEYS = Keys.of(DECODING.attr)


def _index(choice: int | str) -> int | None:
    """A layer or head box's value (``"mean"`` or 0-based) as ``reading`` takes it."""
    return None if choice == "mean" else int(choice)


def _settings(keys: Keys) -> tuple[int, int | None, int | None]:
    """``(n_steps, layer, head)`` as this session last chose them (the defaults before the controls are drawn)."""
    state = st.session_state
    return (
        int(state.get(keys.steps, STEP_CHOICES[0])),
        _index(state.get(keys.layer, "mean")),
        _index(state.get(keys.head, "mean")),
    )


def controls(ckpt: Checkpoint, keys: Keys) -> tuple[str, int | None, int | None, int]:
    """The method followed, the attention methods' layer and head, and the integration points: seeded from the link
    (a bad value noted and ignored) and written back. Returns ``(method, layer, head, n_steps)``."""
    cfg = ckpt.config
    n_layers, n_heads = cfg.n_decoder_layers, cfg.n_heads
    url.init_widget(keys.method, lambda p: url.choice_param(p, METHOD, METHODS, DEFAULT_METHOD, what="method"))
    url.init_widget(
        keys.layer,
        lambda p: url.head_param(p, LAYER, n_layers, "mean", ("mean",), what="layer"),
        valid=lambda v: v == "mean" or v in range(n_layers),
    )
    url.init_widget(
        keys.head,
        lambda p: url.head_param(p, HEAD, n_heads, "mean", ("mean",), what="head"),
        valid=lambda v: v == "mean" or v in range(n_heads),
    )
    url.init_widget(
        keys.steps,
        lambda p: url.choice_param(
            p, STEPS, {str(s): s for s in STEP_CHOICES}, STEP_CHOICES[0], what="integration points"
        ),
    )
    # Two columns of two boxes, not two rows of two columns: the same 2 × 2 on screen in fewer layout blocks, each
    # of which every visitor's every click sends and the server builds again
    c1, c2 = st.columns(2)
    method = c1.selectbox(
        "Method followed",
        METHODS,
        key=keys.method,
        format_func=NAMES.__getitem__,
        help="Its row is marked, and the what-if starts from the source word it ranks highest.",
    )
    n_steps = c2.selectbox(
        "IG points",
        STEP_CHOICES,
        key=keys.steps,
        help="Integration points integrated gradients start with, placed where log p changes "
        "most; the stretches that miss are halved until the scores sum to within 1 % of "
        "the change (at most 256 points). More to start with: steadier, slower.",
    )
    layer = c1.selectbox(
        "Attention layer",
        ["mean"] + list(range(n_layers)),
        key=keys.layer,
        format_func=lambda v: "mean over layers" if v == "mean" else f"layer {v + 1}",
    )
    head = c2.selectbox(
        "Attention head",
        ["mean"] + list(range(n_heads)),
        key=keys.head,
        format_func=lambda v: "mean / all heads" if v == "mean" else f"head {v + 1}",
    )
    url.put(METHOD, method, DEFAULT_METHOD)
    url.put(LAYER, url.format_head(layer), "mean")
    url.put(HEAD, url.format_head(head), "mean")
    url.put(STEPS, n_steps, STEP_CHOICES[0])
    return method, _index(layer), _index(head), int(n_steps)


def toggle(key: str) -> bool:
    """The toggle (session key ``key``), seeded from ``?attr=`` and written back; closing it takes the view's other
    parameters out of the link."""
    url.init_widget(key, lambda p: url.bool_param(p, PARAM, False, what="attention vs attribution"))
    on = st.toggle(LABEL, key=key, help=HELP)
    url.put(PARAM, on, False)
    if not on:
        for name in (METHOD, LAYER, HEAD, STEPS):
            url.put(name, None)
        whatif_view.forget_link()
    return on


def scope_text(layer: int | None, head: int | None) -> str:
    """Which attention the attention rows are: ``"layer 3, head 2"``, ``"the mean over layers"`` …"""
    where = "the mean over layers" if layer is None else f"layer {layer + 1}"
    return where + (", all heads (α: their mean)" if head is None else f", head {head + 1}")


def gap_line(reading: StepAttribution) -> str:
    """The integrated gradients' completeness check in one sentence."""
    g = reading.gradients
    total = float(g.integrated_gradients.source.sum() + g.integrated_gradients.prefix.sum())
    gap = "∞" if not np.isfinite(g.completeness_gap) else f"{g.completeness_gap:.1%}"
    advice = f" The {MAX_STEPS}-point limit stopped the refinement." if g.completeness_gap > TOLERANCE else ""
    return (
        f"Integrated gradients ({g.n_steps} points, adaptive, `<{g.baseline}>` baseline): the scores sum to "
        f"{total:+.2f} "
        f"nats, log p(token) − log p(baseline) = {g.log_prob - g.baseline_log_prob:+.2f}; completeness gap "
        f"**{gap}**.{advice}"
    )


def faithfulness_rows(faith: Faithfulness) -> list[dict]:
    """One row per method and random: its AOPC comprehensiveness and sufficiency."""
    floor = faith.aopc("comprehensiveness", "random") if "random" in faith.comprehensiveness else None
    rows = []
    for m in list(METHODS) + ["random"]:
        comp, suff = faith.aopc("comprehensiveness", m), faith.aopc("sufficiency", m)
        beats = "" if m == "random" or floor is None else ("yes" if comp > floor else "no")
        rows.append(
            {"method": NAMES.get(m, m), "comprehensiveness ↑": comp, "sufficiency ↓": suff, "comp. > random": beats}
        )
    return rows


def faithfulness_html(rows: list[dict], large: bool) -> str:
    """The faithfulness table (:func:`faithfulness_rows`) as HTML: drawn as ``st.table`` draws it, or in presentation
    mode (``large``) as :func:`ui.widgets.show_table` draws tables there. Built once per step and ranking for the
    room (:mod:`serving.figures`): ``st.table`` of a pandas Styler was the view's largest cost on every click."""
    return widgets.table_html(rows, FAITH_FORMATS) if large else widgets.styled_table_html(rows, FAITH_FORMATS)


def share_line(ckpt: Checkpoint, src_ids: Sequence[int], decoding: Decoding, step: int, n_steps: int) -> str:
    """The source's share at steps 1 … ``step`` as a line (each step's attribution shared, so a step already seen
    costs nothing)."""
    tok = ckpt.tokenizer
    shares = [
        shared_attribution(ckpt, step_inputs(ckpt, src_ids, decoding, t), n_steps).source_share
        for t in range(1, step + 1)
    ]
    labels = [f"{t} {pieces.of_id(tok, decoding.generated[t - 1])}" for t in range(1, step + 1)]
    return share_line_svg(labels, shares, title="Source share at every step so far", large=presentation.is_on())


def step_view(ckpt: Checkpoint, src, decoding: Decoding, step: int, keys: Keys) -> None:
    """The view of step ``step`` of ``decoding`` of the source ``src`` (:class:`~decoding.stepping.SourceInput`;
    ``keys``: the page's session keys)."""
    tok, cfg = ckpt.tokenizer, ckpt.config
    method, layer, head, n_steps = controls(ckpt, keys)
    inputs = step_inputs(ckpt, src.ids, decoding, step)
    try:
        reading = shared_attribution(ckpt, inputs, n_steps)
    except ValueError as exc:
        st.warning(f"This step cannot be attributed: {exc}.")
        return
    src_shares, pre, negative = share_matrices(reading, layer, head)
    title = f"Step {step}: what “{pieces.of_id(tok, inputs.token_id)}” owes each piece"
    grid = (
        [NAMES[m] for m in METHODS],
        pieces.shown(tok, src.tokens) if cfg.is_encoder_decoder else [],
        src_shares,
        pieces.of_ids(tok, inputs.prefix),
        pre,
        negative,
    )
    large = presentation.is_on()
    # built once per step, method, layer, head and mode for every visitor (serving.figures): the room redraws the
    # same few grids on every click
    st.markdown(
        figures.shared(attribution_html, *grid, current=METHODS.index(method), title=title, large=large),
        unsafe_allow_html=True,
    )
    if cfg.is_encoder_decoder:
        st.markdown(
            f"**Source vs prefix:** {reading.source_share:.0%} of this prediction comes from the English "
            f"source, {1 - reading.source_share:.0%} from the German written so far (integrated gradients, "
            "Σ|score| per side)."
        )
    else:
        st.markdown(
            "**No source:** a decoder-only model predicts from its prefix alone (the prompt and what it wrote)."
        )
    # one caption of two lines: what the rows are, and the completeness check
    st.caption(
        f"Attention rows: {scope_text(layer, head)}. Shares are |score| over each side's total; the gradient "
        f"methods explain log p(token), the attention ones say where one sub-layer looked.  \n{gap_line(reading)}"
    )
    if cfg.is_encoder_decoder:
        if st.session_state.get(keys.line) or st.button(
            "Source share at every step so far",
            key=keys.line_button,
            icon=":material/show_chart:",
            help="One integrated-gradients run per step not yet seen.",
        ):
            st.session_state[keys.line] = True
            st.markdown(share_line(ckpt, src.ids, decoding, step, n_steps), unsafe_allow_html=True)
    try:
        faith = shared_faithfulness(ckpt, inputs, n_steps, reading, layer, head)
    except ValueError as exc:
        faith = None
        st.info(f"No faithfulness for this step: {exc}.")
    if faith is not None:
        table = figures.shared(faithfulness_html, faithfulness_rows(faith), large)
        if large:
            st.html(table)
        else:
            st.markdown(table, unsafe_allow_html=True)
        st.caption(
            FAITHFUL_NOTE + f" Here k = {', '.join(map(str, faith.counts))} piece(s); p(token) = "
            f"{faith.probability:.3f}."
        )
    downloads = st.container(horizontal=True)  # side by side, wrapping on a phone
    downloads.download_button(
        "Download the scores (.npz)",
        data=lambda: attribution_npz(ckpt, reading, faith, layer, head),
        file_name=f"attribution-step{step}.npz",
        mime="application/octet-stream",
        key=keys.export,
        on_click="ignore",
        icon=":material/download:",
        help="Every method's signed scores and shares, every layer's and head's attention, the "
        "completeness check and the faithfulness; load with numpy.load.",
    )
    downloads.download_button(  # the view draws no chart whose camera button would save a picture
        "Download the grid (.svg)",
        data=lambda: attribution_svg(*grid, title=title),
        file_name=f"attribution-step{step}.svg",
        mime="image/svg+xml",
        key=keys.svg,
        on_click="ignore",
        icon=":material/download:",
        help="The methods × pieces grid above as an SVG picture.",
    )
    whatif_view.section(ckpt, src, inputs, reading.scores(method, layer, head), keys, reading)
    # Last, once this visitor's own computations are done: a prefetch that took the free slot a moment before their
    # faithfulness or what-if asked for it would make them wait for a whole later step's attribution
    prefetch_after(ckpt, src.ids, decoding, step, n_steps, layer, head)


def translate_attribution(ckpt: Checkpoint, src, run: Decoding, step: int) -> None:
    """The Translate page's toggle and, when on, the view of ``step`` (drawn in the page's fragment, which its
    controls rerun: :func:`app_pages.translate.translate.attention_view` says why not a fragment of its own)."""
    if not toggle(TRANSLATE_KEYS.toggle):
        return
    if step == 0:
        st.caption("Press **Next**: the view shows, for that step, what the token taken owes each piece.")
        prefetch_after(ckpt, src.ids, run, 0, *_settings(TRANSLATE_KEYS))
        return
    step_view(ckpt, src, run, step, TRANSLATE_KEYS)


def lab_attribution(ckpt: Checkpoint, src, full: Decoding, step: int) -> None:
    """The Decoding lab's tab: the toggle and, when on, the view of ``step`` of the lab's own decoding (sampled and
    forced tokens included)."""
    if not toggle(LAB_KEYS.toggle):
        st.caption(HELP + " Turn it on to compute it for this step.")
        return
    step_view(ckpt, src, full, step, LAB_KEYS)
