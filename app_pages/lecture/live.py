"""The Worked examples page's scaled dot-product attention: the step-by-step renderer, and its live mode.

In the live mode the steps run on a loaded model's own numbers (:mod:`teaching.live`): ``X`` entering one attention
module and one head's ``W^Q``, ``W^K``, ``W^V``, cut to a few tokens and columns a lecture can read, go through the
same five steps as the editable example; then come the model's weights with every column of the head, which equal the
Attention page's heatmap. The kind, layer and head are kept in the link (``?numbers=live&kind=&layer=&head=``).
"""

from __future__ import annotations

import math

import numpy as np
import streamlit as st

from charts.teaching import annotated_matrix
from decoding.stepping import strip_eos
from serving import figures, heavy
from teaching import live, worked
from ui import checkpoints, state, url
from ui.page_state import LECTURE, Field
from ui.widgets import show_figure
from viz.attention import attention_heatmap
from viz.labels import KIND_SHORT, head_name, view_title
from viz.theme import HALF_PX
from viz.token_labels import plotly_escape

#: The mode picker's choices: the link's spelling (``?numbers=``) → the label.
MODES = {"example": "Editable example", "live": "Live numbers from the model"}
MODE_KEY = LECTURE.numbers.key
#: Session keys of the live mode's controls (forgotten when another checkpoint is picked: ``ui.page_state``).
KIND_KEY, LAYER_KEY, HEAD_KEY = LECTURE.kind.key, LECTURE.layer.key, LECTURE.head.key
#: The link's parameters of the live mode's controls.
LIVE_PARAMS = ("kind", "layer", "head")


def show_matrix(z, title: str, rows=None, cols=None, where=None) -> None:
    """A small matrix with its numbers in the cells (:func:`charts.teaching.annotated_matrix`), in ``where``; built once
    per process for equal numbers and labels (:mod:`serving.figures`: a room looking at one head builds it once)."""
    show_figure(figures.shared(annotated_matrix, z, title, rows, cols), where)


def attention_steps_view(r: dict, d_k: int, scale: bool, causal: bool, q_labels, k_labels, v_columns) -> None:
    """The five steps of ``softmax(QKᵀ/√d_k [+ mask]) V`` as :func:`teaching.worked.attention_steps` returns them
    (``r``, for Q and K ``d_k`` columns wide), two charts a row (rows = queries, columns = keys), and the weights'
    row sums. ``v_columns``: the names of V's feature columns, which the output has too."""
    a, b = st.columns(2)
    show_matrix(r["scores"], "1. Scores QKᵀ", q_labels, k_labels, a)
    show_matrix(r["scaled"], f"2. ÷ √d_k = √{d_k}" if scale else "2. (no scaling)", q_labels, k_labels, b)
    a, b = st.columns(2)
    mask_title = "3. Causal mask: future keys → −∞" if causal else "3. (no mask)"
    show_matrix(r["masked"], mask_title, q_labels, k_labels, a)
    show_matrix(r["weights"], "4. Softmax per row (each row sums to 1)", q_labels, k_labels, b)
    show_matrix(r["output"], "5. Weights × V: one row per query, V's feature columns", q_labels, list(v_columns))
    st.caption("Row sums of the weights: " + ", ".join(f"{s:.4f}" for s in r["weights"].sum(axis=1)))


def live_mode() -> bool:
    """The picker between the editable example and the live numbers (``?numbers=live``); True for the live mode.
    In the editable example the live mode's parameters (:data:`LIVE_PARAMS`) are taken out of the link."""
    url.init_widget(MODE_KEY, lambda p: url.choice_param(p, "numbers", list(MODES), "example", what="numbers"))
    mode = st.radio(
        "Numbers",
        list(MODES),
        format_func=MODES.get,
        horizontal=True,
        key=MODE_KEY,
        help="The live numbers are one head of the model picked in the sidebar, on the shared sentence.",
    )
    url.put("numbers", mode, "example")
    if mode != "live":  # the editable example has no kind, layer or head: a link to it must not carry them
        for name in LIVE_PARAMS:
            url.put(name, None)
    return mode == "live"


def chart_labels(labels) -> list[str]:
    """Token pieces as a small matrix's row and column names: escaped for Plotly (``<bos>`` is no tag), and a piece
    that comes again numbered by its position (``. (9)``), since rows with one name would be drawn as one."""
    seen: set[str] = set()
    out = []
    for i, piece in enumerate(labels):
        out.append(plotly_escape(piece if piece not in seen else f"{piece} ({i})"))
        seen.add(piece)
    return out


def live_section(box: Field) -> None:
    """The live mode: the sentence box, the kind, layer and head, and the numbers of that head (a fragment: a
    control reruns it alone). ``box``: the page's text box (``ui.page_state``). Without a model it says so."""
    folder = st.session_state.get("app_ckpt_path")
    ckpt, why = (None, "no checkpoint was found") if folder is None else checkpoints.load_other(folder)
    if ckpt is None:
        st.warning(f"No live numbers: {why}. Pick a checkpoint in the sidebar, or use the editable example.")
        return
    _live(ckpt, box)


@st.fragment
def _live(ckpt, box: Field) -> None:
    typed = state.sentence_box(ckpt, box)
    state.set_text(typed)
    src = state.source_for(ckpt, typed)
    if src is None:
        return
    model, cfg = ckpt.model, ckpt.config
    kinds = live.kinds_of(model)
    c1, c2, c3 = st.columns([2.6, 1, 1], vertical_alignment="bottom")
    url.init_widget(
        KIND_KEY,
        lambda p: url.choice_param(p, "kind", kinds, kinds[0], what="attention kind"),
        valid=lambda k: k in kinds,
    )
    kind = c1.radio("Attention", kinds, format_func=KIND_SHORT.get, horizontal=True, key=KIND_KEY)
    n_layers = live.layers_of(model, kind)
    url.init_widget(LAYER_KEY, lambda p: url.index_param(p, "layer", n_layers, 0), valid=lambda v: v in range(n_layers))
    url.init_widget(
        HEAD_KEY, lambda p: url.index_param(p, "head", cfg.n_heads, 0), valid=lambda v: v in range(cfg.n_heads)
    )
    layer = c2.selectbox("Layer", list(range(n_layers)), format_func=lambda i: f"layer {i + 1}", key=LAYER_KEY)
    head = c3.selectbox("Head", list(range(cfg.n_heads)), format_func=head_name, key=HEAD_KEY)
    url.put("kind", kind, kinds[0])
    url.put("layer", layer + 1, 1)
    url.put("head", head + 1, 1)

    tgt_inputs = strip_eos(state.full_translation(ckpt, src)[0], cfg.eos_id)  # as the Attention page's trace has them
    raw_trace, trace = state.traced(ckpt, src, tgt_inputs)
    numbers = heavy.shared(
        ("live head", *checkpoints.checkpoint_version(ckpt), tuple(src.ids), tuple(tgt_inputs), kind, layer, head),
        lambda: live.live_head(model, raw_trace, kind, layer, head),
        "this head's numbers",
    )
    q_pieces, k_pieces = trace.labels(kind)
    _cut_steps(numbers, q_pieces, k_pieces)
    _full_width(numbers, raw_trace, q_pieces, k_pieces)


def _cut_steps(h: live.LiveHead, q_pieces, k_pieces) -> None:
    """The inputs, the projections and the five steps on the cut: a few tokens, a few of the head's columns."""
    c = live.cut(h)
    m = c.of(h)
    ql, kl = chart_labels(q_pieces)[: c.n_q], chart_labels(k_pieces)[: c.n_k]
    features = [f"f{j}" for j in range(c.n_features)]
    columns = [f"d{j}" for j in range(c.n_cols)]
    st.markdown(
        f"**X** = {h.x_note()}: one row per token, d_model = {h.d_model} features"
        + (f"; the keys and values read **memory** = {h.x_kv_note()}." if h.kind == "cross" else ".")
    )
    st.caption(
        f"Cut to what a lecture can read: the first {c.n_q} of {c.q_total} queries and {c.n_k} of {c.k_total} "
        f"keys, {c.n_features} of the {h.d_model} features of X (the rows of W), {c.n_cols} of this head's "
        f"d_k = {h.d_k} columns. $Q = XW^Q + b^Q$ sums over all {h.d_model} features: its {c.n_cols} columns "
        "shown are exactly the model's."
    )
    inputs = st.columns(2)  # X at half width: its few columns need no more
    show_matrix(m["x_q"], f"X: {c.n_features} of {h.d_model} features", ql, features, inputs[0])
    if h.kind == "cross":
        show_matrix(m["x_kv"], f"memory: {c.n_features} of {h.d_model} features", kl, features, inputs[1])
    for row in (("w_q", "w_k", "w_v"), ("q", "k", "v")):
        cols = st.columns(3)
        for where, name in zip(cols, row, strict=True):
            letter = name[-1].upper()
            if name.startswith("w"):
                title, rows = f"W<sup>{letter}</sup>: {c.n_cols} of {h.d_k} columns", features
            else:
                title = f"{letter} = XW<sup>{letter}</sup> + b<sup>{letter}</sup>: {c.n_cols} of {h.d_k}"
                rows = ql if name == "q" else kl
            show_matrix(m[name], title, rows, columns, where)
    biases = "; ".join(
        f"$b^{n[-1].upper()}$ = (" + ", ".join(f"{x:.4f}" for x in m[n][0]) + ", …)" for n in ("b_q", "b_k", "b_v")
    )
    st.caption(
        f"The biases' first {c.n_cols} entries: {biases}."
        + (" Q and K are shown after RoPE's rotation by position." if h.position == "rope" else "")
    )
    r = worked.attention_steps(m["q"], m["k"], m["v"], scale=True, causal=h.causal)
    attention_steps_view(r, c.n_cols, True, h.causal, ql, kl, columns)
    st.markdown(_why_different(h, c, q_pieces, k_pieces))


def _why_different(h: live.LiveHead, c: live.Cut, q_pieces, k_pieces) -> str:
    """Why step 4's weights are not the model's (or that they are), with the numbers of the model's strongest pair in
    the window."""
    reasons = []
    if c.n_cols < h.d_k:
        i, j = np.unravel_index(int(np.argmax(h.weights[: c.n_q, : c.n_k])), (c.n_q, c.n_k))
        full, shown = live.score_split(h, c.n_cols, int(i), int(j))
        root, root_cut = math.sqrt(h.d_k), math.sqrt(c.n_cols)
        reasons.append(
            f"A score adds one product per column of the head: for `{q_pieces[i]}` → `{k_pieces[j]}` the model adds "
            f"{h.d_k}, q·k = {full:.4f}, of which the {c.n_cols} columns shown give {shown:.4f} and the other "
            f"{h.d_k - c.n_cols} give {full - shown:.4f}. The model divides by √{h.d_k} = {root:.4g} "
            f"({full / root:.4f}), the steps above by √{c.n_cols} = {root_cut:.4g} ({shown / root_cut:.4f}): each "
            "divides by the root of the number of products it adds, which keeps the spread of its scores alike "
            "(*Why divide by √d_k?* below), but the products of the dropped columns are missing, so the weights "
            "differ."
        )
    if c.drops_keys and not h.causal:  # a causal row sees only earlier keys, all of them in the window
        reasons.append(
            f"The softmax above shares each row among {c.n_k} keys; the model's among all {c.k_total}, "
            "so its rows in the window below sum to less than 1."
        )
    if h.position == "alibi":
        reasons.append("The model also adds ALiBi's −m·|i − j| to its scores, which the steps above leave out.")
    if not reasons:
        return (
            "**Step 4 is the model's weights**: the steps above use every column of the head and every key "
            "(compare the window below)."
        )
    return "**Why step 4 is not the model's weights.** " + " ".join(reasons)


def _full_width(h: live.LiveHead, raw_trace, q_pieces, k_pieces) -> None:
    """The model's weights with all d_k columns: the cut's window in numbers and the whole sentence as the Attention
    page draws it, how far they are from that page's, and the export."""
    c = live.cut(h)
    title = view_title(h.kind, h.layer, h.head)
    st.subheader(f"The model's weights: all {h.d_k} columns, ÷ √{h.d_k}")
    a, b = st.columns(2)
    show_matrix(
        h.weights[: c.n_q, : c.n_k],
        f"The window above: {c.n_q} × {c.n_k} of {c.q_total} × {c.k_total}",
        chart_labels(q_pieces)[: c.n_q],
        chart_labels(k_pieces)[: c.n_k],
        a,
    )
    show_figure(
        figures.shared(
            attention_heatmap, h.weights, list(q_pieces), list(k_pieces), title=title, causal=h.causal, width=HALF_PX
        ),
        b,
    )
    page = raw_trace.attention[h.kind][h.layer, h.head].double().numpy()
    diff = float(np.abs(page - h.weights).max())
    st.caption(
        f"The Attention page's heatmap of {title} for this sentence differs from these weights by at most "
        f"{diff:.1e}{' (bit for bit the same)' if diff == 0 else ''}: the same numbers, computed with the "
        "model's own projections and softmax. This head's output, weights × V, goes with the other heads' into "
        f"Concat(head$_1$, …, head$_{{{h.n_heads}}}$) $W^O$."
    )
    st.download_button(  # made when asked for, not at every click
        "Download this head's numbers (.npz)",
        data=lambda: live.npz_bytes(h, q_pieces, k_pieces),
        file_name=f"{h.kind}-layer{h.layer + 1}-head{h.head + 1}.npz",
        mime="application/octet-stream",
        key="we_export",
        on_click="ignore",
        icon=":material/download:",
        help="Every row and column, float64: X (and the memory), this head's W^Q, W^K, W^V, biases and rows of W^O, "
        "Q, K, V, the weights and the output, with the tokens; load with numpy.load.",
    )
    st.caption("Every chart's camera button (top right, on hover) saves it as SVG.")
