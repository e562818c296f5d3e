"""Page "Attention": every head of every layer for the current sentence and its translation.

Tabs (only the open one runs; ``?tab=`` keeps it): Heads (the layer's heads as heatmaps), Tokens & lines (one
query's or one key's weights, and BertViz-style lines), Model grid (every layer × head), Summaries (mean / max
over heads, attention rollout), Head statistics, Ablation (switch heads off; sweep every head), Compare (a second
sentence or a second checkpoint side by side, with a difference map when the shapes match). The kind,
layer and head above the tabs are shared by all of them and kept in the URL (``?kind=&layer=&head=``).
"""

import math
from pathlib import Path

import streamlit as st
import torch

from model.analysis import (ablation_sweep, attention_rollout, greedy_with_head_masks, head_statistics,
                            sequence_log_probs)
from model.decoding import MAX_INPUT_CHARS, default_max_new_tokens, strip_eos
from training.launch import run_arch
from model.trace import KIND_TITLES, trace_pair
from ui import attention_views as views
from ui import state, url
from viz.attention import attention_heatmap, causal_blank, display_token, highlight_tokens_html
from viz.attention_views import (ALTAIR_GRID_CELLS, difference_heatmap, head_stat_heatmap, lines_figure,
                                 log_prob_figure, model_grid_altair, model_grid_figure, token_bar_figure)
from viz.theme import PLOTLY_CONFIG

ckpt = state.require_checkpoint()
tok, cfg = ckpt.tokenizer, ckpt.config
ckpt_path, ckpt_mtime = state.checkpoint_version(ckpt)

SHORT_TITLES = {"encoder": "Encoder self", "decoder": "Decoder self (masked)", "cross": "Cross (decoder → encoder)",
                "self": "Self (masked)"}
TABS = ["Heads", "Tokens & lines", "Model grid", "Summaries", "Head statistics", "Ablation", "Compare"]


# --- cached computations (keyed by checkpoint folder + version + sentence; the model itself is not hashed) ---------
@st.cache_data(show_spinner=False, max_entries=256)
def _log_probs(path: str, mtime: float, src_ids: tuple, tgt_ids: tuple, heads: tuple, _model) -> list[float]:
    masks = views.head_masks(heads, _layer_counts(_model.cfg), _model.cfg.n_heads)
    return sequence_log_probs(_model, list(src_ids) or None, list(tgt_ids), masks).tolist()


@st.cache_data(show_spinner="Decoding without those heads…", max_entries=128)
def _greedy_without(path: str, mtime: float, src_ids: tuple, heads: tuple, max_new: int, _model) -> list[int]:
    masks = views.head_masks(heads, _layer_counts(_model.cfg), _model.cfg.n_heads)
    return greedy_with_head_masks(_model, list(src_ids) or None, masks, max_new_tokens=max_new)


@st.cache_data(show_spinner="Removing each head in turn…", max_entries=64)
def _sweep(path: str, mtime: float, src_ids: tuple, tgt_ids: tuple, _model) -> dict:
    return {k: v.tolist() for k, v in ablation_sweep(_model, list(src_ids) or None, list(tgt_ids)).items()}


def _layer_counts(c) -> dict[str, int]:
    if c.is_encoder_decoder:
        return {"encoder": c.n_encoder_layers, "decoder": c.n_decoder_layers, "cross": c.n_decoder_layers}
    return {"self": c.n_decoder_layers}


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


def _plot(fig, key: str | None = None) -> None:
    st.plotly_chart(fig, width="stretch", theme=None, key=key, config=PLOTLY_CONFIG)


# --- sentence, translation, trace -----------------------------------------------------------------------------
st.title("Attention")
st.caption("Each heatmap is one attention head: **rows = queries** (the token doing the looking), "
           "**columns = keys** (the tokens looked at); every row sums to 1. Hover a cell for the pair and its weight.")

if "attn_text" not in st.session_state:
    st.session_state["attn_text"] = state.current_text(ckpt)
typed = st.text_input(state.input_label(ckpt), key="attn_text")
state.set_text(typed)
src = state.source_for(ckpt, typed)
if src is None:
    st.stop()
all_ids, output_ids = state.full_translation(ckpt, src)
st.markdown(f"**{'Translation' if cfg.is_encoder_decoder else 'Continuation'}:** "
            f"{tok.decode(output_ids) or '(empty output)'}")

tgt_inputs = strip_eos(all_ids, cfg.eos_id)  # <eos> is an output, never a decoder input
trace = trace_pair(ckpt.model, tok, src.ids, tgt_inputs, src.offsets)

# --- shared controls: kind, layer, head, word level -------------------------------------------------------------
kinds = trace.kinds
params = st.query_params
c1, c2, c3, c4 = st.columns([2, 1, 1, 0.8], vertical_alignment="bottom")
# Each control: the session's value, else the link's (clamped, with a note), else the default; then into the link.
url.init_widget("attn_kind", lambda p: url.choice_param(p, "kind", kinds, kinds[-1], what="attention kind"),
                valid=lambda k: k in kinds)
kind = c1.radio("Attention", kinds, format_func=lambda k: SHORT_TITLES[k], horizontal=True, key="attn_kind")
n_layers = trace.attention[kind].shape[0]
url.init_widget("attn_layer", lambda p: url.index_param(p, "layer", n_layers, n_layers - 1),
                valid=lambda v: v in range(n_layers))
url.init_widget("attn_head", lambda p: url.head_param(p, "head", cfg.n_heads, "all"),
                valid=lambda h: h in ("all", "mean") or h in range(cfg.n_heads))
url.init_widget("attn_words", lambda p: url.bool_param(p, "words", False, what="word level"))
layer = c2.selectbox("Layer", list(range(n_layers)), format_func=lambda i: f"layer {i + 1}", key="attn_layer")
head = c3.selectbox("Head", ["all"] + list(range(cfg.n_heads)) + ["mean"], key="attn_head",
                    format_func=lambda h: {"all": "all heads", "mean": "mean over heads"}[h] if isinstance(h, str)
                    else f"head {h + 1}")
words = c4.toggle("Word level", key="attn_words",
                  help="Merge BPE pieces into words: sum over a word's key pieces, mean over its query pieces "
                       "(rows still sum to 1).")
url.put("kind", kind)
url.put("layer", layer + 1)
url.put("head", url.format_head(head))
url.put("words", words, False)

q_pieces, k_pieces = trace.labels(kind)
causal = kind in ("decoder", "self")
attn = trace.attention[kind]  # [layers, heads, q, k]
if words:
    attn, q_labels, k_labels = views.word_level(attn, q_pieces, k_pieces)
else:
    q_labels, k_labels = q_pieces, k_pieces
unit = " · words" if words else ""
weights = attn[layer]  # [heads, q, k]
explain = {
    "encoder": "Every English piece attends to every English piece (no mask).",
    "decoder": "Each German input piece attends to itself and the pieces before it; the grey upper triangle is "
               "masked (the future is hidden).",
    "cross": "Each German input piece (a query; it predicts the next token) attends to the English pieces "
             "(keys and values come from the encoder output, the memory). Lengths may differ: "
             f"{len(q_labels)} × {len(k_labels)}.",
    "self": "Each piece attends to itself and the pieces before it.",
}[kind]
st.info(explain)

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
                    _plot(attention_heatmap(weights[h], q_labels, k_labels, causal=causal,
                                            title=f"{KIND_TITLES[kind]} · layer {layer + 1} · head {h + 1}{unit}"),
                          key=f"hm_{kind}_{layer}_{h}")
        else:
            w = weights.mean(0) if head == "mean" else weights[head]
            name = "mean over heads" if head == "mean" else f"head {head + 1}"
            _plot(attention_heatmap(w, q_labels, k_labels, causal=causal, height=620,
                                    title=f"{KIND_TITLES[kind]} · layer {layer + 1} · {name}{unit}"))

# --- Tokens & lines ---------------------------------------------------------------------------------------------
if tab_tokens.open:
    with tab_tokens:
        if isinstance(head, int):
            w, name = weights[head], f"head {head + 1}"
        else:
            w, name = weights.mean(0), "mean over heads"
            if head == "all":
                st.caption("All heads are selected above, so this tab follows their **mean**; pick one head to follow it.")
        where = f"{SHORT_TITLES[kind]} · layer {layer + 1} · {name}{unit}"
        for key, name, n in (("attn_query", "query", len(q_labels)), ("attn_key", "key", len(k_labels))):
            url.init_widget(key, lambda p, name=name, n=n: url.int_param(p, name, 0, 0, n - 1, what="token number"),
                            valid=lambda v, n=n: v in range(n))
        left, right = st.columns(2)
        with left:
            qi = st.selectbox("Query token (a row)", list(range(len(q_labels))), key="attn_query",
                              format_func=lambda i: f"{i}: {display_token(q_labels[i])}")
            q_word = display_token(q_labels[qi])
            _plot(token_bar_figure(w[qi], k_labels, title=f"What “{q_word}” attends to · {where}",
                                   mark=qi if kind != "cross" else None, axis_title="keys"))
            st.markdown(highlight_tokens_html(k_labels, w[qi], caption=f"“{q_word}” over the keys (the strongest outlined)"),
                        unsafe_allow_html=True)
        with right:
            kj = st.selectbox("Key token (a column)", list(range(len(k_labels))), key="attn_key",
                              format_func=lambda i: f"{i}: {display_token(k_labels[i])}")
            k_word = display_token(k_labels[kj])
            _plot(token_bar_figure(w[:, kj], q_labels, title=f"Who attends to “{k_word}” · {where}",
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
        _plot(lines_figure(w, q_labels, k_labels, threshold=threshold, query=qi if focus else None, title=where))

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
            _plot(model_grid_figure(attn, q_labels, k_labels, causal=causal, title=title, highlight=picked))
        else:
            st.altair_chart(model_grid_altair(attn, q_labels, k_labels, causal=causal, selected=picked),
                            on_select=_on_grid_click, selection_mode="head_pick", key="attn_grid_alt", theme=None)
        st.session_state["attn_grid_open"] = None if picked is None else picked[0] * cfg.n_heads + picked[1]
        st.selectbox("Open a head", list(range(n_layers * cfg.n_heads)), index=None, key="attn_grid_open",
                     placeholder="Pick a head to open it large…", on_change=_on_grid_pick,
                     format_func=lambda i: f"layer {i // cfg.n_heads + 1} · head {i % cfg.n_heads + 1}")
        if picked is not None:
            _plot(attention_heatmap(attn[layer][head], q_labels, k_labels, causal=causal, height=560,
                                    title=f"{KIND_TITLES[kind]} · layer {layer + 1} · head {head + 1}{unit}"))

# --- Summaries --------------------------------------------------------------------------------------------------
if tab_summary.open:
    with tab_summary:
        stack = torch.stack([attn.mean(1), attn.max(1).values], dim=1)  # [layers, 2, q, k]
        _plot(model_grid_figure(stack, q_labels, k_labels, causal=causal, col_names=["mean over heads", "max over heads"],
                                title=f"{KIND_TITLES[kind]} · mean and max over heads, per layer{unit}"))
        st.caption("The mean keeps rows summing to 1; the max shows where *some* head looks (rows may sum to more than 1).")
        st.subheader("Attention rollout")
        self_kinds = [k for k in ("encoder", "decoder", "self") if k in trace.attention]
        cols = st.columns(len(self_kinds))
        for col, k in zip(cols, self_kinds):
            rollout = attention_rollout(trace.attention[k])  # [n, n]
            r_q, r_k = trace.labels(k)
            if words:
                rollout, r_q, r_k = views.word_level(rollout, r_q, r_k)
            with col:
                _plot(attention_heatmap(rollout, r_q, r_k, causal=k != "encoder", zmax=None,
                                        title=f"Rollout · {KIND_TITLES[k]}{unit}"))
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
                   "(piece level, whatever the word-level switch says). Click a column header to sort.")
        st.dataframe(
            views.stats_frame(stats), hide_index=True, key="attn_stats_table",
            column_config={n: st.column_config.NumberColumn(n, help=views.STAT_HELP.get(n), format="%.3f")
                           for n in stats},
        )
        if kind == "cross":
            st.caption("Cross-attention: *same* and *previous* compare German position i with English position i, "
                       "which is rarely meaningful; *first* is the first English piece, *eos* the source's <eos>.")
        elif kind in ("decoder", "self"):
            st.caption("*first* is the weight on <bos>, a common resting place (attention sink) for heads with nothing to do.")
        names = list(stats)
        url.init_widget("attn_stat", lambda p: url.choice_param(p, "stat", names, names[0], what="statistic"),
                        valid=lambda n: n in names)
        stat = st.selectbox("Statistic", names, key="attn_stat", format_func=lambda n: f"{n}: {views.STAT_HELP.get(n, '')}")
        url.put("stat", stat, names[0])
        k_len = trace.attention[kind].shape[-1]
        _plot(head_stat_heatmap(stats[stat], stat, zmin=0.0, zmax=math.log(k_len) if stat == "entropy" else 1.0,
                                title=f"{KIND_TITLES[kind]} · {stat} per head"))

# --- Ablation ---------------------------------------------------------------------------------------------------
if tab_ablation.open:
    with tab_ablation:
        st.caption("Switch heads off (their output is zeroed before Wᴼ) and score **the translation above** again "
                   "(teacher forcing): the log-probability of each of its tokens, with and without those heads.")
        counts = _layer_counts(cfg)
        options = views.head_options(counts, cfg.n_heads)
        url.init_widget("attn_ablate", lambda p: url.choices_param(p, "ablate", options, what="heads switched off"),
                        valid=lambda v: set(v) <= set(options))
        chosen = st.multiselect("Heads to switch off", options, key="attn_ablate",
                                placeholder="e.g. cross L2 H3")
        url.put("ablate", sorted(chosen, key=options.index), [])
        heads = tuple(sorted(chosen, key=options.index))
        src_key, tgt_key = tuple(src.ids), tuple(all_ids)
        scored = tok.tokens(all_ids[1:])
        if len(all_ids) < 2:
            st.info("The translation is empty: there is nothing to score.")
        else:
            base = _log_probs(ckpt_path, ckpt_mtime, src_key, tgt_key, (), _model=ckpt.model)
            m1, m2, m3 = st.columns(3)
            m1.metric("Total log-prob, all heads", f"{sum(base):.3f}")
            if heads:
                ablated = _log_probs(ckpt_path, ckpt_mtime, src_key, tgt_key, heads, _model=ckpt.model)
                change = sum(ablated) - sum(base)
                m2.metric("Total log-prob, heads removed", f"{sum(ablated):.3f}", delta=f"{change:+.3f} nats")
                m3.metric("Probability of the translation", f"× {math.exp(change):.3g}",
                          help="exp(change): how much likelier (> 1) or less likely (< 1) the same translation becomes.")
                _plot(log_prob_figure(scored, base, ablated, title=f"Per-token log-probability · {len(heads)} head(s) off"))
                limit = default_max_new_tokens(cfg, len(src.ids))
                new_ids = _greedy_without(ckpt_path, ckpt_mtime, src_key, heads, limit, _model=ckpt.model)
                new_out = [t for t in new_ids[1:] if t != cfg.eos_id]
                same = new_out == list(output_ids)
                st.markdown(f"**Greedy translation without {', '.join(heads)}:** {tok.decode(new_out) or '(empty output)'} "
                            f"{'— *unchanged*' if same else '— *changed*'}")
            else:
                m2.metric("Total log-prob, heads removed", "—")
                _plot(log_prob_figure(scored, base, title="Per-token log-probability, all heads"))
                st.info("Pick one or more heads above to switch them off.")

            st.subheader("Every head, one at a time")
            sweep_key = (ckpt_path, ckpt_mtime, src_key, tgt_key)
            if "_attn_sweep_for" not in st.session_state:  # a link with ?sweep=1 shows the sweep again
                wanted, note = url.bool_param(params, "sweep", False)
                st.session_state["_attn_sweep_for"] = sweep_key if wanted else None
                url.show_notes(note)
            if st.button("Sweep all heads", key="attn_sweep",
                         help=f"{sum(counts.values()) * cfg.n_heads} scorings of the translation, one per head"):
                st.session_state["_attn_sweep_for"] = sweep_key
            swept = st.session_state.get("_attn_sweep_for") == sweep_key
            url.put("sweep", swept, False)
            if swept:
                result = _sweep(ckpt_path, ckpt_mtime, src_key, tgt_key, _model=ckpt.model)
                st.caption("Drop in the translation's total log-probability when that head alone is removed (nats): "
                           "**red = the head helped** this output, blue = the output got likelier without it.")
                cols = st.columns(len(result))
                for col, (k, drop) in zip(cols, result.items()):
                    with col:
                        _plot(head_stat_heatmap(torch.tensor(drop), "drop (nats)", diverging=True,
                                                title=f"{SHORT_TITLES[k]}"), key=f"sweep_{k}")

# --- Compare -----------------------------------------------------------------------------------------------------
if tab_compare.open:
    with tab_compare:
        modes = {"sentence": "another sentence", "checkpoint": "another checkpoint"}
        url.init_widget("attn_cmp_mode", lambda p: url.choice_param(p, "compare", modes, modes["sentence"],
                                                                    what="comparison"))
        mode = st.radio("Compare with", list(modes.values()), horizontal=True, key="attn_cmp_mode")
        url.put("compare", next(k for k, v in modes.items() if v == mode), "sentence")
        other_trace, other_name = None, ""
        if mode == "another sentence":
            default = next(p for p in state.presets_for(ckpt) if p != src.text)
            url.init_widget("attn_cmp_text", lambda p: url.text_param(p, "compare_text", default, MAX_INPUT_CHARS,
                                                                      what="second sentence"))
            other_text = st.text_input("Second sentence", key="attn_cmp_text")
            too_long = url.put_text("compare_text", other_text, default)
            if too_long:
                st.caption(too_long)
            other_src = state.source_for(ckpt, other_text)
            if other_src is not None:
                o_all, o_out = state.full_translation(ckpt, other_src)
                other_trace = trace_pair(ckpt.model, tok, other_src.ids, strip_eos(o_all, cfg.eos_id))
                other_name = f"“{other_src.text}” → {tok.decode(o_out)}"
        else:
            others = {n: p for n, p in state.available_checkpoints().items() if Path(p) != Path(ckpt.path)}
            # checkpoints of this one's architecture first: those are the ones whose attention kinds match
            others = dict(sorted(others.items(), key=lambda item: run_arch(item[1]) != cfg.arch))
            if not others:
                st.info("Only one checkpoint is available. Train another (`python -m training.train --out runs/NAME`) "
                        "and copy its `best/` folder under `checkpoints/` to compare two models.")
            else:
                url.init_widget("attn_cmp_ckpt", lambda p: url.choice_param(p, "compare_ckpt", list(others),
                                                                            next(iter(others)), what="second checkpoint"),
                                valid=lambda n: n in others)
                name = st.selectbox("Second checkpoint", list(others), key="attn_cmp_ckpt")
                url.put("compare_ckpt", name, next(iter(others)))
                other, error = state.load_other(others[name])
                if error:
                    st.warning(f"That checkpoint cannot be loaded: {error}")
                elif other.config.arch != cfg.arch:
                    st.warning("The two checkpoints have different architectures; their attention kinds differ.")
                elif other.tokenizer.to_str() == tok.to_str():
                    # Same tokenizer: the second model reads the same source and this translation (teacher forcing),
                    # so the two maps have the same shape and differ only in where the models look.
                    other_trace = trace_pair(other.model, tok, src.ids, tgt_inputs)
                    other_name = f"checkpoint {name}, same sentence and translation"
                else:
                    o_src = state.source_for(other, src.text)
                    if o_src is not None:
                        o_all, o_out = state.full_translation(other, o_src)
                        other_trace = trace_pair(other.model, other.tokenizer, o_src.ids, strip_eos(o_all, other.config.eos_id))
                        other_name = f"checkpoint {name} (its own tokenizer and translation: {other.tokenizer.decode(o_out)})"
        if other_trace is not None:
            o_attn = other_trace.attention[kind]
            o_layer = min(layer, o_attn.shape[0] - 1)
            o_q, o_k = other_trace.labels(kind)
            if words:
                o_attn, o_q, o_k = views.word_level(o_attn, o_q, o_k)
            pick = head if isinstance(head, int) and head < o_attn.shape[1] else "mean"
            first = weights[pick] if pick != "mean" else weights.mean(0)
            second = o_attn[o_layer][pick] if pick != "mean" else o_attn[o_layer].mean(0)
            name = "mean over heads" if pick == "mean" else f"head {pick + 1}"
            st.caption(f"{SHORT_TITLES[kind]} · layer {layer + 1} · {name}{unit}. Second: {other_name}.")
            left, right = st.columns(2)
            with left:
                _plot(attention_heatmap(first, q_labels, k_labels, causal=causal, title="First"), key="cmp_a")
            with right:
                _plot(attention_heatmap(second, o_q, o_k, causal=causal, title="Second"), key="cmp_b")
            if tuple(first.shape) == tuple(second.shape):
                a = causal_blank(first.numpy()) if causal else first
                b = causal_blank(second.numpy()) if causal else second
                _plot(difference_heatmap(a, b, q_labels, k_labels, title="Difference (second − first)"), key="cmp_d")
            else:
                st.info(f"The two maps have different shapes ({tuple(first.shape)} vs {tuple(second.shape)}), so "
                        "there is no cell-by-cell difference: compare their patterns side by side.")

# --- tokens and export ------------------------------------------------------------------------------------------
with st.expander("Tokens, ids and export"):
    st.write("Source:", " ".join(f"{display_token(t)}({i})" for t, i in zip(trace.src_tokens, trace.src_ids)))
    st.write("Decoder inputs:", " ".join(f"{display_token(t)}({i})" for t, i in zip(trace.tgt_tokens, trace.tgt_ids)))
    st.download_button(
        "Download the attention tensors (.npz)", data=views.attention_npz(trace), file_name="attention.npz",
        mime="application/octet-stream", key="attn_export", on_click="ignore", icon=":material/download:",
        help="One float32 array [layers, heads, queries, keys] per kind (" + ", ".join(kinds) + ") plus the tokens "
             "and ids; load with numpy.load. Piece level, whatever the word-level switch says.",
    )
    st.caption("Every chart's camera button (top right, on hover) saves it as SVG.")
