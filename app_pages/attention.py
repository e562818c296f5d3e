"""Page "Attention": every head of every layer for the current sentence and its translation.

Tabs (only the open one runs; ``?tab=`` keeps it): Heads (the layer's heads as heatmaps), Tokens & lines (one
query's or one key's weights, and BertViz-style lines), Model grid (every layer × head), Summaries (mean / max
over heads, attention rollout), Head statistics, Ablation (switch heads off; sweep every head), Compare (a second
sentence or a second checkpoint side by side, with a difference map when the shapes match). The kind,
layer and head above the tabs are shared by all of them and kept in the URL (``?kind=&layer=&head=``).
"""

import math

import streamlit as st
import torch

from model.analysis import attention_rollout, head_statistics
from model.config import CAUSAL_KINDS
from model.decoding import strip_eos
from model.trace import trace_pair
from ui import attention_views as views
from ui import pieces, presentation, state, url, widgets
from ui.attention_tabs import ablation_tab, compare_tab, plot
from viz.attention import attention_heatmap, highlight_tokens_html
from viz.attention_views import head_stat_heatmap, lines_figure, token_bar_figure
from viz.grid import ALTAIR_GRID_CELLS, model_grid_altair, model_grid_figure
from viz.labels import KIND_SHORT, KIND_TITLES, head_name, kind_note, view_title
from viz.theme import PAGE_PX

ckpt = state.require_checkpoint()
tok, cfg = ckpt.tokenizer, ckpt.config

TABS = ["Heads", "Tokens & lines", "Model grid", "Summaries", "Head statistics", "Ablation", "Compare"]


def _open_head(layer: int, head: int) -> None:
    st.session_state["attn_layer"], st.session_state["attn_head"] = layer, head


def _on_grid_pick() -> None:
    """The grid's "open a head" selectbox → the shared layer / head."""
    idx = st.session_state.get("attn_grid_open")
    if idx is not None:
        _open_head(*divmod(int(idx), cfg.n_heads))


def _on_grid_click() -> None:
    """A click on the Altair grid → the shared layer / head."""
    chart_state = st.session_state.get("attn_grid_alt") or {}
    picked = views.grid_pick(chart_state.get("selection", {}))
    if picked is not None:
        _open_head(*picked)


# --- sentence, translation, trace -----------------------------------------------------------------------------
# A projector shows 1280×720: the first chart must start on the first screen: the title beside the sentence, the
# translation beside the reading guide (an expander), then one row of controls and the tabs.
head, sentence = st.columns([1, 2.6], vertical_alignment="bottom")
head.title("Attention")
if "attn_text" not in st.session_state:
    st.session_state["attn_text"] = state.current_text(ckpt)
typed = sentence.text_input(state.input_label(ckpt), key="attn_text")
state.set_text(typed)
src = state.source_for(ckpt, typed)
if src is None:
    st.stop()
all_ids, output_ids = state.full_translation(ckpt, src)
said, guide_col = st.columns([3, 1], vertical_alignment="center")
said.markdown(f"**{'Translation' if cfg.is_encoder_decoder else 'Continuation'}:** "
              f"{tok.decode(output_ids) or '(empty output)'}")
said.caption("**Rows = queries**, **columns = keys**; each row sums to 1. Hover a cell for the pair and its weight.")
guide = guide_col.expander("How to read these maps")
guide.markdown("Each heatmap is one attention head: **rows = queries** (the token doing the looking), **columns = "
               "keys** (the tokens looked at). " + pieces.word_note(tok))

tgt_inputs = strip_eos(all_ids, cfg.eos_id)  # <eos> is an output, never a decoder input
raw_trace = trace_pair(ckpt.model, tok, src.ids, tgt_inputs, src.offsets)
trace = pieces.shown_trace(raw_trace, tok)  # every label below is a piece as shown (GPT-2's Ġ as ␣)

# --- shared controls: kind, layer, head, word level -------------------------------------------------------------
kinds = trace.kinds
params = st.query_params
c1, c2, c3, c4 = st.columns([3, 1, 1, 1], vertical_alignment="bottom")
# Each control: the session's value, else the link's (clamped, with a note), else the default; then into the link.
url.init_widget("attn_kind", lambda p: url.choice_param(p, "kind", kinds, kinds[-1], what="attention kind"),
                valid=lambda k: k in kinds)
kind = c1.radio("Attention", kinds, format_func=lambda k: KIND_SHORT[k], horizontal=True, key="attn_kind")
n_layers = trace.attention[kind].shape[0]
url.init_widget("attn_layer", lambda p: url.index_param(p, "layer", n_layers, n_layers - 1),
                valid=lambda v: v in range(n_layers))
url.init_widget("attn_head", lambda p: url.head_param(p, "head", cfg.n_heads, "all"),
                valid=lambda h: h in ("all", "mean") or h in range(cfg.n_heads))
url.init_widget("attn_words", lambda p: url.bool_param(p, "words", False, what="word level"))
layer = c2.selectbox("Layer", list(range(n_layers)), format_func=lambda i: f"layer {i + 1}", key="attn_layer")
head = c3.selectbox("Head", ["all"] + list(range(cfg.n_heads)) + ["mean"], key="attn_head",
                    format_func=head_name)
words = c4.toggle("Word level", key="attn_words",
                  help="Merge pieces into words: sum over a word's key pieces, mean over its query pieces "
                       "(rows still sum to 1).")
url.put("kind", kind)
url.put("layer", layer + 1)
url.put("head", url.format_head(head))
url.put("words", words, False)

view = views.make_view(trace, kind, layer, head, words)
attn, q_labels, k_labels = view.attn, view.q_labels, view.k_labels  # [layers, heads, q, k], rows, columns
causal, unit, weights = view.causal, view.unit, view.weights
guide.info(kind_note(kind, len(q_labels), len(k_labels), translation=cfg.is_encoder_decoder))

url.show_notes(url.choice_param(params, "tab", TABS, TABS[0], )[1])  # the tabs read ?tab= themselves
tab_heads, tab_tokens, tab_grid, tab_summary, tab_stats, tab_ablation, tab_compare = st.tabs(
    TABS, key="tab", bind="query-params")

# --- Heads ------------------------------------------------------------------------------------------------------
if tab_heads.open:
    with tab_heads:
        if head == "all":
            for h in range(weights.shape[0]):
                if h % 2 == 0:  # one row of two charts at a time, so that heads read 1 2 / 3 4
                    cols = st.columns(2)
                with cols[h % 2]:
                    plot(attention_heatmap(weights[h], q_labels, k_labels, causal=causal,
                                           title=view_title(kind, layer, h, words)), key=f"hm_{kind}_{layer}_{h}")
        else:
            w, _ = view.one_head()
            plot(attention_heatmap(w, q_labels, k_labels, causal=causal, height=620, width=PAGE_PX,
                                   title=view_title(kind, layer, head, words)))

# --- Tokens & lines ---------------------------------------------------------------------------------------------
if tab_tokens.open:
    with tab_tokens:
        w, shown = view.one_head()
        if head == "all":
            st.caption("All heads are selected above, so this tab follows their **mean**; pick one head to follow it.")
        where = view_title(kind, layer, shown, words, short=True)
        for key, name, n in (("attn_query", "query", len(q_labels)), ("attn_key", "key", len(k_labels))):
            url.init_widget(key, lambda p, name=name, n=n: url.int_param(p, name, 0, 0, n - 1, what="token number"),
                            valid=lambda v, n=n: v in range(n))
        left, right = st.columns(2)
        with left:
            qi = st.selectbox("Query token (a row)", list(range(len(q_labels))), key="attn_query",
                              format_func=lambda i: f"{i}: {q_labels[i]}")
            q_word = q_labels[qi]
            plot(token_bar_figure(w[qi], k_labels, title=f"What “{q_word}” attends to", subtitle=where,
                                  mark=qi if kind != "cross" else None, axis_title="keys"))
            st.markdown(highlight_tokens_html(k_labels, w[qi], caption=f"“{q_word}” over the keys (the strongest outlined)"),
                        unsafe_allow_html=True)
        with right:
            kj = st.selectbox("Key token (a column)", list(range(len(k_labels))), key="attn_key",
                              format_func=lambda i: f"{i}: {k_labels[i]}")
            k_word = k_labels[kj]
            plot(token_bar_figure(w[:, kj], q_labels, title=f"Who attends to “{k_word}”", subtitle=where,
                                  mark=kj if kind != "cross" else None, axis_title="queries"))
            st.markdown(highlight_tokens_html(q_labels, w[:, kj], caption=f"the queries' weight on “{k_word}” "
                                              "(a column does not sum to 1)"), unsafe_allow_html=True)
        st.subheader("Lines")
        s1, s2 = st.columns([2, 1], vertical_alignment="bottom")
        url.init_widget("attn_line_threshold", lambda p: url.float_param(p, "threshold", 0.05, 0.0, 0.5))
        url.init_widget("attn_lines_focus", lambda p: url.bool_param(p, "focus", False))
        threshold = s1.slider("Hide lines below this weight", 0.0, 0.5, step=0.01, key="attn_line_threshold")
        focus = s2.toggle("Only the picked query", key="attn_lines_focus")
        url.put("query", qi, 0)
        url.put("key", kj, 0)
        url.put("threshold", round(threshold, 4), 0.05)
        url.put("focus", focus, False)
        st.caption("Queries on the left, keys on the right; a line's opacity is its weight (the same scale for every head).")
        plot(lines_figure(w, q_labels, k_labels, threshold=threshold, query=qi if focus else None, title=where))

# --- Model grid -------------------------------------------------------------------------------------------------
if tab_grid.open:
    with tab_grid:
        picked = (layer, head) if isinstance(head, int) else None
        styles = {"plotly": "Plotly", "altair": "Altair (click a head to open it)"}
        url.init_widget("attn_grid_style", lambda p: url.choice_param(p, "grid", styles, styles["plotly"],
                                                                      what="grid style"))
        style = st.radio("Grid", list(styles.values()), horizontal=True, key="attn_grid_style",
                         help="The Altair grid answers a click on a head by opening it below (and in the other tabs).")
        url.put("grid", next(k for k, v in styles.items() if v == style), "plotly")
        title = f"{KIND_TITLES[kind]} · every layer × head{unit}"
        if style.startswith("Altair") and attn.numel() > ALTAIR_GRID_CELLS:
            st.info(f"This sentence gives {attn.numel():,} cells, too many for the clickable grid "
                    f"(up to {ALTAIR_GRID_CELLS:,}); showing the Plotly grid. Pick a head below to open it.")
            style = "Plotly"
        if style == "Plotly":
            plot(model_grid_figure(attn, q_labels, k_labels, causal=causal, title=title, highlight=picked))
        else:
            widgets.show_altair(model_grid_altair(attn, q_labels, k_labels, causal=causal, selected=picked),
                                on_select=_on_grid_click, selection_mode="head_pick", key="attn_grid_alt", theme=None)
        st.session_state["attn_grid_open"] = None if picked is None else picked[0] * cfg.n_heads + picked[1]
        st.selectbox("Open a head", list(range(n_layers * cfg.n_heads)), index=None, key="attn_grid_open",
                     placeholder="Pick a head to open it large…", on_change=_on_grid_pick,
                     format_func=lambda i: f"layer {i // cfg.n_heads + 1} · head {i % cfg.n_heads + 1}")
        if picked is not None:
            plot(attention_heatmap(attn[layer][head], q_labels, k_labels, causal=causal, height=560, width=PAGE_PX,
                                   title=view_title(kind, layer, head, words)))

# --- Summaries --------------------------------------------------------------------------------------------------
if tab_summary.open:
    with tab_summary:
        stack = torch.stack([attn.mean(1), attn.max(1).values], dim=1)  # [layers, 2, q, k]
        plot(model_grid_figure(stack, q_labels, k_labels, causal=causal, col_names=["mean over heads", "max over heads"],
                               title=f"{KIND_TITLES[kind]} · mean and max over heads, per layer{unit}"))
        st.caption("The mean keeps rows summing to 1; the max shows where *some* head looks (rows may sum to more than 1).")
        st.subheader("Attention rollout")
        self_kinds = [k for k in trace.kinds if k != "cross"]  # rollout chains square maps only
        cols = st.columns(len(self_kinds))
        for col, k in zip(cols, self_kinds):
            rollout = attention_rollout(trace.attention[k])  # [n, n]
            r_q, r_k = trace.labels(k)
            if words:
                rollout, r_q, r_k = views.word_level(rollout, r_q, r_k)
            with col:
                plot(attention_heatmap(rollout, r_q, r_k, causal=k in CAUSAL_KINDS, zmax=None,
                                       width=PAGE_PX // len(self_kinds), title=f"Rollout · {KIND_TITLES[k]}{unit}"))
        st.caption(
            "Rollout (Abnar & Zuidema, 2020): each layer's head-averaged attention is mixed with the identity for the "
            "residual connection (½·A + ½·I), and the layers are multiplied, estimating how much each input position "
            "flows into each output position. The colour scale runs to the largest value shown."
        )
        if "cross" in trace.attention:
            st.info("No rollout for cross-attention: rollout chains square maps over *the same* positions (layer l's "
                    "outputs are layer l+1's inputs, with the residual as the identity). Cross-attention maps German "
                    "positions onto English ones, its keys are always the encoder's final output rather than the previous "
                    "layer, and there is no residual path from the English side, so its layers cannot be multiplied.")

# --- Head statistics --------------------------------------------------------------------------------------------
if tab_stats.open:
    with tab_stats:
        eos_index = len(trace.src_tokens) - 1 if kind in ("encoder", "cross") else None
        stats = head_statistics(trace.attention[kind], eos_index=eos_index)
        st.caption(f"{KIND_TITLES[kind]}: one row per head, each number averaged over the query rows "
                   "(piece level, whatever the word-level switch says)."
                   + ("" if presentation.is_on() else " Click a column header to sort."))
        widgets.show_table(
            views.stats_frame(stats), key="attn_stats_table", formats={n: "{:.3f}" for n in stats},
            column_config={n: st.column_config.NumberColumn(n, help=views.STAT_HELP.get(n)) for n in stats},
        )
        if kind == "cross":
            st.caption("Cross-attention: *same* and *previous* compare German position i with English position i, "
                       "which is rarely meaningful; *first* is the first English piece, *eos* the source's <eos>.")
        elif causal:
            st.caption("*first* is the weight on <bos>, a common resting place (attention sink) for heads with nothing to do.")
        names = list(stats)
        url.init_widget("attn_stat", lambda p: url.choice_param(p, "stat", names, names[0], what="statistic"),
                        valid=lambda n: n in names)
        stat = st.selectbox("Statistic", names, key="attn_stat", format_func=lambda n: f"{n}: {views.STAT_HELP.get(n, '')}")
        url.put("stat", stat, names[0])
        k_len = trace.attention[kind].shape[-1]
        plot(head_stat_heatmap(stats[stat], stat, zmin=0.0, zmax=math.log(k_len) if stat == "entropy" else 1.0,
                               title=f"{KIND_TITLES[kind]} · {stat} per head"))

# --- Ablation and Compare (ui/attention_tabs.py) ---------------------------------------------------------------
if tab_ablation.open:
    with tab_ablation:
        ablation_tab(ckpt, src, all_ids, output_ids, view)
if tab_compare.open:
    with tab_compare:
        compare_tab(ckpt, src, tgt_inputs, view)

# --- tokens and export ------------------------------------------------------------------------------------------
with st.expander("Tokens, ids and export"):
    st.write("Source:", " ".join(f"{t}({i})" for t, i in zip(trace.src_tokens, trace.src_ids)))
    st.write("Decoder inputs:", " ".join(f"{t}({i})" for t, i in zip(trace.tgt_tokens, trace.tgt_ids)))
    st.download_button(
        "Download the attention tensors (.npz)", data=views.attention_npz(raw_trace), file_name="attention.npz",
        mime="application/octet-stream", key="attn_export", on_click="ignore", icon=":material/download:",
        help="One float32 array [layers, heads, queries, keys] per kind (" + ", ".join(kinds) + ") plus the tokens "
             "and ids; load with numpy.load. Piece level, whatever the word-level switch says.",
    )
    st.caption("Every chart's camera button (top right, on hover) saves it as SVG.")
