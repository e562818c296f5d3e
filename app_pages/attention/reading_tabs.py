"""The Attention page's four reading tabs as Streamlit renderers: Tokens & lines, Model grid, Summaries and Head
statistics (the experiments, Ablation and Compare, are in :mod:`app_pages.attention.tabs`).

Each reads the page's current view (:class:`app_pages.attention.views.View`: kind, layer, head, word level and the
weights shown) and keeps its own controls in the link (``?query=&key=&threshold=&focus=``, ``?grid=``, ``?stat=``). A
head opened in the grid is written to the shared layer / head (session keys ``attn_layer`` / ``attn_head``).
"""

from __future__ import annotations

import functools
import math

import streamlit as st
import torch

from app_pages.attention import views
from app_pages.attention.tabs import plot
from model.config import CAUSAL_KINDS
from reading.analysis import attention_rollout, head_statistics
from reading.trace import Trace
from serving.figures import shared
from ui import presentation, url, widgets
from viz.attention import attention_heatmap, highlight_tokens_html
from viz.attention_views import lines_figure, token_bar_figure
from viz.grid import ALTAIR_GRID_CELLS, model_grid_altair, model_grid_figure
from viz.head_stats import head_stat_heatmap
from viz.labels import KIND_TITLES, view_title
from viz.theme import PAGE_PX

GRID_STYLES = {"plotly": "Plotly", "altair": "Altair (click a head to open it)"}


def tokens_tab(view: views.View) -> None:
    """One query's weights over the keys and one key's weights over the queries (bars and coloured tokens), then
    BertViz-style lines for the picked head (the mean over heads when all are shown)."""
    w, shown = view.one_head()
    q_labels, k_labels, kind = view.q_labels, view.k_labels, view.kind
    if view.head == "all":
        st.caption("All heads are selected above, so this tab follows their **mean**; pick one head to follow it.")
    where = view_title(kind, view.layer, shown, view.words, short=True)
    for key, name, n in (("at_token_query", "query", len(q_labels)), ("at_token_key", "key", len(k_labels))):
        url.init_widget(
            key,
            functools.partial(url.int_param, name=name, default=0, lo=0, hi=n - 1, what="token number"),
            valid=range(n).__contains__,
        )
    left, right = st.columns(2)
    with left:
        qi = st.selectbox(
            "Query token (a row)",
            list(range(len(q_labels))),
            key="at_token_query",
            format_func=lambda i: f"{i}: {q_labels[i]}",
        )
        q_word = q_labels[qi]
        plot(
            shared(
                token_bar_figure,
                w[qi],
                k_labels,
                title=f"What “{q_word}” attends to",
                subtitle=where,
                mark=qi if kind != "cross" else None,
                axis_title="keys",
            )
        )
        st.markdown(
            highlight_tokens_html(k_labels, w[qi], caption=f"“{q_word}” over the keys (the strongest outlined)"),
            unsafe_allow_html=True,
        )
    with right:
        kj = st.selectbox(
            "Key token (a column)",
            list(range(len(k_labels))),
            key="at_token_key",
            format_func=lambda i: f"{i}: {k_labels[i]}",
        )
        k_word = k_labels[kj]
        plot(
            shared(
                token_bar_figure,
                w[:, kj],
                q_labels,
                title=f"Who attends to “{k_word}”",
                subtitle=where,
                mark=kj if kind != "cross" else None,
                axis_title="queries",
            )
        )
        st.markdown(
            highlight_tokens_html(
                q_labels, w[:, kj], caption=f"the queries' weight on “{k_word}” (a column does not sum to 1)"
            ),
            unsafe_allow_html=True,
        )
    st.subheader("Lines")
    s1, s2 = st.columns([2, 1], vertical_alignment="bottom")
    url.init_widget("at_token_threshold", lambda p: url.float_param(p, "threshold", 0.05, 0.0, 0.5))
    url.init_widget("at_token_focus", lambda p: url.bool_param(p, "focus", False))
    threshold = s1.slider("Hide lines below this weight", 0.0, 0.5, step=0.01, key="at_token_threshold")
    focus = s2.toggle("Only the picked query", key="at_token_focus")
    url.put("query", qi, 0)
    url.put("key", kj, 0)
    url.put("threshold", round(threshold, 4), 0.05)
    url.put("focus", focus, False)
    st.caption(
        "Queries on the left, keys on the right; a line's opacity is its weight (the same scale for every head)."
    )
    plot(shared(lines_figure, w, q_labels, k_labels, threshold=threshold, query=qi if focus else None, title=where))


def _open_head(layer: int, head: int) -> None:
    st.session_state["at_layer"], st.session_state["at_head"] = layer, head


def _on_grid_pick(n_heads: int) -> None:
    """The grid's "open a head" selectbox → the shared layer / head."""
    idx = st.session_state.get("at_grid_open")
    if idx is not None:
        _open_head(*divmod(int(idx), n_heads))


def _on_grid_click() -> None:
    """A click on the Altair grid → the shared layer / head."""
    chart_state = st.session_state.get("at_grid_alt") or {}
    picked = views.grid_pick(chart_state.get("selection", {}))
    if picked is not None:
        _open_head(*picked)


def grid_tab(view: views.View) -> None:
    """Every layer × head of the view's kind in one figure (Plotly, or a clickable Altair grid when it is small
    enough: :data:`viz.grid.ALTAIR_GRID_CELLS`), and the picked head large below it."""
    attn, q_labels, k_labels, layer, head = view.attn, view.q_labels, view.k_labels, view.layer, view.head
    n_layers, n_heads = attn.shape[0], attn.shape[1]
    picked = (layer, head) if isinstance(head, int) else None
    url.init_widget(
        "at_grid_style", lambda p: url.choice_param(p, "grid", GRID_STYLES, GRID_STYLES["plotly"], what="grid style")
    )
    style = st.radio(
        "Grid",
        list(GRID_STYLES.values()),
        horizontal=True,
        key="at_grid_style",
        help="The Altair grid answers a click on a head by opening it below (and in the other tabs).",
    )
    url.put("grid", next(k for k, v in GRID_STYLES.items() if v == style), "plotly")
    title = f"{KIND_TITLES[view.kind]} · every layer × head{view.unit}"
    if style.startswith("Altair") and attn.numel() > ALTAIR_GRID_CELLS:
        st.info(
            f"This sentence gives {attn.numel():,} cells, too many for the clickable grid "
            f"(up to {ALTAIR_GRID_CELLS:,}); showing the Plotly grid. Pick a head below to open it."
        )
        style = "Plotly"
    if style == "Plotly":
        plot(shared(model_grid_figure, attn, q_labels, k_labels, causal=view.causal, title=title, highlight=picked))
    else:
        widgets.show_altair(
            shared(model_grid_altair, attn, q_labels, k_labels, causal=view.causal, selected=picked),
            on_select=_on_grid_click,
            selection_mode="head_pick",
            key="at_grid_alt",
            theme=None,
        )
    st.session_state["at_grid_open"] = None if picked is None else picked[0] * n_heads + picked[1]
    st.selectbox(
        "Open a head",
        list(range(n_layers * n_heads)),
        index=None,
        key="at_grid_open",
        placeholder="Pick a head to open it large…",
        on_change=_on_grid_pick,
        args=(n_heads,),
        format_func=lambda i: f"layer {i // n_heads + 1} · head {i % n_heads + 1}",
    )
    if picked is not None:
        plot(
            shared(
                attention_heatmap,
                attn[picked],
                q_labels,
                k_labels,
                causal=view.causal,
                height=560,
                width=PAGE_PX,
                title=view_title(view.kind, layer, head, view.words),
            )
        )


def summaries_tab(trace: Trace, view: views.View) -> None:
    """Mean and max over heads per layer, then attention rollout (Abnar & Zuidema, 2020) for every self-attention
    kind of ``trace`` (cross-attention has none, and the tab says why)."""
    attn, q_labels, k_labels = view.attn, view.q_labels, view.k_labels
    stack = torch.stack([attn.mean(1), attn.max(1).values], dim=1)  # [layers, 2, q, k]
    plot(
        shared(
            model_grid_figure,
            stack,
            q_labels,
            k_labels,
            causal=view.causal,
            col_names=["mean over heads", "max over heads"],
            title=f"{KIND_TITLES[view.kind]} · mean and max over heads, per layer{view.unit}",
        )
    )
    st.caption("The mean keeps rows summing to 1; the max shows where *some* head looks (rows may sum to more than 1).")
    st.subheader("Attention rollout")
    self_kinds = [k for k in trace.kinds if k != "cross"]  # rollout chains square maps only
    cols = st.columns(len(self_kinds))
    for col, k in zip(cols, self_kinds, strict=True):
        rollout = attention_rollout(trace.attention[k])  # [n, n]
        r_q, r_k = trace.labels(k)
        if view.words:
            rollout, r_q, r_k = views.word_level(rollout, r_q, r_k)
        with col:
            plot(
                shared(
                    attention_heatmap,
                    rollout,
                    r_q,
                    r_k,
                    causal=k in CAUSAL_KINDS,
                    zmax=None,
                    width=PAGE_PX // len(self_kinds),
                    title=f"Rollout · {KIND_TITLES[k]}{view.unit}",
                )
            )
    st.caption(
        "Rollout (Abnar & Zuidema, 2020): each layer's head-averaged attention is mixed with the identity for the "
        "residual connection (½·A + ½·I), and the layers are multiplied, estimating how much each input position "
        "flows into each output position. The colour scale runs to the largest value shown."
    )
    if "cross" in trace.attention:
        st.info(
            "No rollout for cross-attention: rollout chains square maps over *the same* positions (layer l's "
            "outputs are layer l+1's inputs, with the residual as the identity). Cross-attention maps German "
            "positions onto English ones, its keys are always the encoder's final output rather than the previous "
            "layer, and there is no residual path from the English side, so its layers cannot be multiplied."
        )


def stats_caption(kind: str) -> str:
    """The head statistics' caption for attention ``kind``: which query rows each column averages.

    Not all the same rows: *previous* has no key before the first query, and *same* none past the last key when a
    cross-attention has more queries than keys (:func:`reading.analysis.head_statistics`). So *previous* can stand
    above *max*, which averages every row: the caption says so, or the table reads as an error."""
    return (
        f"{KIND_TITLES[kind]}: one row per head (piece level, whatever the word-level switch says). *entropy*, "
        "*first*, *max*" + (" and *eos*" if kind in ("encoder", "cross") else "") + " average every query row; "
        "*same* only the rows that have a key at their own position, and *previous* only those that have a key "
        "one position before (never the first row), so *previous* can be higher than *max*."
    )


def stats_tab(trace: Trace, view: views.View) -> None:
    """One row per head of the view's kind (:func:`reading.analysis.head_statistics`, piece level), then one
    statistic as a layer × head heatmap."""
    kind = view.kind
    eos_index = len(trace.src_tokens) - 1 if kind in ("encoder", "cross") else None
    stats = head_statistics(trace.attention[kind], eos_index=eos_index)
    st.caption(stats_caption(kind) + ("" if presentation.is_on() else " Click a column header to sort."))
    widgets.show_table(
        views.stats_frame(stats),
        key="at_chart_stats",
        formats={n: "{:.3f}" for n in stats},
        column_config={n: st.column_config.NumberColumn(n, help=views.STAT_HELP.get(n)) for n in stats},
    )
    if kind == "cross":
        st.caption(
            "Cross-attention: *same* and *previous* compare German position i with English position i, "
            "which is rarely meaningful; *first* is the first English piece, *eos* the source's <eos>."
        )
    elif view.causal:
        st.caption(
            "*first* is the weight on <bos>, a common resting place (attention sink) for heads with nothing to do."
        )
    names = list(stats)
    url.init_widget(
        "at_stat", lambda p: url.choice_param(p, "stat", names, names[0], what="statistic"), valid=lambda n: n in names
    )
    stat = st.selectbox("Statistic", names, key="at_stat", format_func=lambda n: f"{n}: {views.STAT_HELP.get(n, '')}")
    url.put("stat", stat, names[0])
    k_len = trace.attention[kind].shape[-1]
    plot(
        shared(
            head_stat_heatmap,
            stats[stat],
            stat,
            zmin=0.0,
            zmax=math.log(k_len) if stat == "entropy" else 1.0,
            title=f"{KIND_TITLES[kind]} · {stat} per head",
        )
    )
