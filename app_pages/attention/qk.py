"""The Attention page's "Query · key" tab: why a head gives a key its weight, with the model's own numbers.

For the kind, layer and head picked above the tabs and one query token (``?query=``, the Tokens & lines tab's query
too), the tab draws what :func:`reading.qk.query_key` computes: each dimension's part of each key's score, the
scores, the mask, ALiBi's bias or RoPE's rotation, the softmax weights (the heatmap's row, checked on the page),
the query and key vectors, and the weighted values that sum to the head's output. ``?sort=1`` draws the dimensions
by their part of the scores. Nothing is computed here: the numbers are read from the sentence's trace, which the
page already holds (:func:`ui.state.traced`, shared through the gate for heavy work).
"""

from __future__ import annotations

import functools
import io

import numpy as np
import streamlit as st

from app_pages.attention import views
from decoding.stepping import SourceInput
from model.checkpoint import Checkpoint
from reading.qk import TENSORS, QueryKey, query_key
from reading.trace import Trace
from serving.figures import shared
from ui import responsive, url, widgets
from viz.labels import KIND_SHORT, view_title
from viz.qk import dimension_order, score_figure, top_dimensions
from viz.qk_vectors import values_figure, vectors_figure
from viz.theme import PAGE_PX

#: The query box's session key and link parameter, shared with the Tokens & lines tab (both pick a query row).
QUERY_KEY = "at_token_query"
SORT_KEY = "at_qk_sort"


def record(ckpt: Checkpoint, raw: Trace, kind: str, layer: int, head: int, query: int) -> QueryKey:
    """:func:`reading.qk.query_key` for one head and query of ``raw``'s sentence (read from its trace)."""
    return query_key(raw, kind, layer, head, query)


def record_npz(rec: QueryKey, query_label: str, key_labels: list[str]) -> bytes:
    """``rec`` as a compressed ``.npz``: one float32 array per tensor of :class:`reading.qk.QueryKey` (``q``, ``k``,
    ``products``, ``scores``, ``logits``, ``weights``, ``v``, ``weighted``, ``output``…; ``bias`` and
    ``scores_unrotated`` where the model has them), ``mask`` (bool), ``query_token`` and ``key_tokens``."""
    arrays = {name: getattr(rec, name).numpy() for name in TENSORS if getattr(rec, name) is not None}
    arrays.update(
        query_token=np.array(query_label),
        key_tokens=np.array(key_labels, dtype=str),
        where=np.array([rec.layer, rec.head, rec.query, rec.query_position, rec.d_k]),
    )
    buffer = io.BytesIO()
    np.savez_compressed(buffer, **arrays)
    return buffer.getvalue()


def _summary(rec: QueryKey, q_label: str, k_labels: list[str]) -> str:
    """The sentence over the charts: the key with the most weight, its score and weight, the dimensions that made it."""
    j = int(np.argmax(rec.weights.numpy()))
    parts = ", ".join(f"{d} ({part:+.2f})" for d, part in top_dimensions(rec.contributions[j].numpy()))
    path = f"score q·k/√{rec.d_k} = {rec.scores[j]:+.2f}"
    if rec.bias is not None:  # + 0.0: the bias at the query's own position reads +0.00, not −0.00
        path += f", plus ALiBi's {rec.bias[j] + 0.0:+.2f}, gives the logit {rec.logits[j]:+.2f}"
    return (
        f"“{q_label}” gives most weight to “{k_labels[j]}”: {path} → weight **{rec.weights[j]:.2f}**; the parts "
        f"of that score largest in size come from dimensions {parts}."
    )


def record_npz_of(
    trace: Trace, kind: str, layer: int, head: int, query: int, query_label: str, key_labels: list[str]
) -> bytes:
    """:func:`record_npz` of one head's and query's record read from ``trace``: what the tab's download makes from
    a trace it holds weakly (:func:`views.made_from_trace_when_asked`)."""
    return record_npz(query_key(trace, kind, layer, head, query), query_label, key_labels)


def qk_tab(
    ckpt: Checkpoint, src: SourceInput, tgt_inputs: list[int], raw: Trace, trace: Trace, view: views.View
) -> None:
    """The tab for the view's kind and layer, its head (the first when all heads or their mean are picked) and the
    query picked here. ``raw`` is the trace as computed from ``src`` and the decoder inputs ``tgt_inputs``, ``trace``
    with its pieces as shown."""
    kind, layer = view.kind, view.layer
    head = view.head if isinstance(view.head, int) else 0
    q_labels, k_labels = (list(x) for x in trace.labels(kind))
    n = len(q_labels)
    url.init_widget(
        QUERY_KEY, lambda p: url.int_param(p, "query", 0, 0, n - 1, what="token number"), valid=lambda v: v in range(n)
    )
    url.init_widget(SORT_KEY, lambda p: url.bool_param(p, "sort", False, what="sort the dimensions"))
    pick, sort_col = st.columns([2, 1.3], vertical_alignment="bottom")
    qi = pick.selectbox(
        "Query token (a row)", list(range(n)), key=QUERY_KEY, format_func=lambda i: f"{i}: {q_labels[i]}"
    )
    sort = sort_col.toggle(
        "Sort the dimensions by their part",
        key=SORT_KEY,
        help="Draw the d_k dimensions by their mean |q_d·k_d|/√d_k over the keys this query "
        "sees, largest first, instead of in the head's order.",
    )
    url.put("query", qi, 0)
    url.put("sort", sort, False)
    notes = []
    if not isinstance(view.head, int):
        notes.append(
            f"{'All heads are' if view.head == 'all' else 'The mean over heads is'} picked above; this "
            "tab shows head 1 (pick one head above to follow it)."
        )
    if view.words:
        notes.append("This tab works on pieces, whatever the word-level switch says: the query is a piece.")
    rec = record(ckpt, raw, kind, layer, head, qi)
    width = responsive.figure_px(PAGE_PX)  # laid out for a phone's width there: shrunk, its labels overlapped
    contributions = rec.contributions.numpy()
    mask = rec.mask.numpy()
    order = dimension_order(contributions, mask, sort)
    own = qi if kind != "cross" else None
    where = view_title(kind, layer, head, short=True)
    norm = (
        "LayerNorm(x), the sub-layer's normalised input (pre-LN)"
        if ckpt.config.norm_first
        else "x, the residual stream itself (post-LN)"
    )
    st.caption(
        f"{where} · query {qi} “{q_labels[qi]}” at position {rec.query_position} · d_k = {rec.d_k}. "
        f"q = x W^Q + b^Q, k = x W^K + b^K and v = x W^V + b^V of this head, where x is {norm}"
        + (" (k and v from the encoder's output)." if kind == "cross" else ".")
        + " "
        + " ".join(notes)
    )
    st.markdown(_summary(rec, q_labels[qi], k_labels))
    widgets.show_figure(
        shared(  # built once per process for equal numbers, shared by every visitor (serving.figures)
            score_figure,
            contributions,
            rec.scores.numpy(),
            rec.weights.numpy(),
            k_labels,
            mask=mask,
            bias=None if rec.bias is None else rec.bias.numpy(),
            unrotated=None if rec.scores_unrotated is None else rec.scores_unrotated.numpy(),
            order=order,
            own=own,
            title=f"How “{q_labels[qi]}” scores every key · {where}",
            width=width,
        ),
        key="at_chart_qk_scores",
    )
    shown = raw.attention[kind][layer, head, qi].numpy()
    gap = float(np.abs(shown - rec.weights.numpy()).max())
    st.caption(
        f"A row is a key. Red dimensions raise its score, blue ones lower it; a score is the sum of its row. "
        f"The weights are the softmax of the scores{' plus the bias' if rec.bias is not None else ''} and "
        f"are row {qi} of the {KIND_SHORT[kind].lower()} heatmap of layer {layer + 1}, head {head + 1} "
        f"(largest difference {gap:.1e})."
        + (" Grey rows are masked: −∞ before the softmax, so weight 0." if not mask.all() else "")
    )
    if rec.position == "alibi":
        st.caption(
            f"ALiBi adds −m·|i − j| to every score, with m = {rec.slope:.4g} for this head (i = "
            f"{rec.query_position}): a diamond is the logit the softmax reads."
        )
    if rec.position == "rope":
        st.caption(
            "RoPE rotates each pair of dimensions (2i, 2i+1) of q by its position times θ_i = "
            "10000^(−2i/d_k), and of each k by its own: q·k then depends on how far apart they are. A ring "
            "is the score without the rotation; the gap to the bar is what the positions add."
        )
    panels = [("q and every k", rec.q.numpy(), rec.k.numpy())]
    if rec.position == "rope":
        panels = [
            ("before the rotation", rec.q_raw.numpy(), rec.k_raw.numpy()),
            ("after the rotation (as scored)", rec.q.numpy(), rec.k.numpy()),
        ]
    widgets.show_figure(
        shared(
            vectors_figure,
            panels,
            q_labels[qi],
            k_labels,
            order=order,
            title=f"The query and the keys, entry by entry · {where}",
            width=width,
        ),
        key="at_chart_qk_vectors",
    )
    widgets.show_figure(
        shared(
            values_figure,
            rec.weighted.numpy(),
            rec.output.numpy(),
            k_labels,
            title=f"What “{q_labels[qi]}” reads: the values, each times its weight",
            width=width,
        ),
        key="at_chart_qk_values",
    )
    st.caption(
        "Each row is a value vector v_j times its weight w_j; the top row, their sum, is the head's output "
        "for this query, before W^O mixes the heads."
    )
    st.download_button(
        "Download these numbers (.npz)",
        data=views.made_from_trace_when_asked(  # the record's tensors are views of the trace's: not kept
            ckpt,
            src,
            tgt_inputs,
            raw,
            functools.partial(
                record_npz_of,
                kind=kind,
                layer=layer,
                head=head,
                query=qi,
                query_label=q_labels[qi],
                key_labels=k_labels,
            ),
        ),
        file_name=f"qk-{kind}-layer{layer + 1}-head{head + 1}-query{qi}.npz",
        mime="application/octet-stream",
        key="at_export_qk",
        on_click="ignore",
        icon=":material/download:",
        help="q, k (before and after any rotation), q ⊙ k, the scores, mask, logits, weights, v, the weighted values "
        "and the output, as float32 arrays with the tokens; load with numpy.load.",
    )
