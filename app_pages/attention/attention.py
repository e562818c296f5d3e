"""Page "Attention": every head of every layer for the current sentence and its translation.

Tabs (only the open one runs; ``?tab=`` keeps it): Heads (the layer's heads as heatmaps), Tokens & lines (one
query's or one key's weights, and BertViz-style lines), Query · key (inside one head: q, k, q·k, the softmax, the
weighted values), Model grid (every layer × head), Summaries (mean / max
over heads, attention rollout), Head statistics, Ablation (switch heads off; sweep every head), Compare (a second
sentence or a second checkpoint side by side, with a difference map when the shapes match). The kind,
layer and head above the tabs are shared by all of them and kept in the URL (``?kind=&layer=&head=``).
"""

import streamlit as st

from app_pages.attention import qk as attention_qk
from app_pages.attention import reading_tabs as reading
from app_pages.attention import views
from app_pages.attention.tabs import ablation_tab, compare_tab, plot
from decoding.stepping import strip_eos
from serving.figures import shared
from ui import checkpoints, model_card, pieces, responsive, state, url
from ui.page_state import ATTENTION
from viz.attention import attention_heatmap, heatmap_fits
from viz.labels import KIND_SHORT, head_name, kind_note, view_title
from viz.theme import HALF_PX, PAGE_PX

ckpt = checkpoints.require_checkpoint()
tok, cfg = ckpt.tokenizer, ckpt.config

TABS = ["Heads", "Tokens & lines", "Query · key", "Model grid", "Summaries", "Head statistics", "Ablation", "Compare"]


@st.fragment
def attention_page() -> None:
    """The page below the sidebar, as a fragment: a change of kind, layer, head or tab reruns this, not the app
    around it (the navigation, the sidebar's picker and summary)."""
    # --- sentence, translation, trace -----------------------------------------------------------------------------
    # A projector shows 1280×720: the first chart must start on the first screen: the title beside the sentence, the
    # translation beside the reading guide (an expander), then one row of controls and the tabs.
    heading, sentence = st.columns([1, 2.6], vertical_alignment="bottom")
    heading.title("Attention")
    if ATTENTION.text_box.key not in st.session_state:
        st.session_state[ATTENTION.text_box.key] = state.current_text(ckpt)
    typed = sentence.text_input(state.input_label(ckpt), key=ATTENTION.text_box.key)
    state.set_text(typed)
    src = state.source_for(ckpt, typed)
    if src is None:
        st.stop()
    all_ids, output_ids = state.full_translation(ckpt, src)
    said, guide_col = st.columns([3, 1], vertical_alignment="center")
    said.markdown(
        f"**{'Translation' if cfg.is_encoder_decoder else 'Continuation'}:** "
        f"{tok.decode(output_ids) or '(empty output)'}"
    )
    said.caption(
        "**Rows = queries**, **columns = keys**; each row sums to 1. Hover a cell for the pair and its weight."
    )
    guide = guide_col.expander("How to read these maps")
    guide.markdown(
        "Each heatmap is one attention head: **rows = queries** (the token doing the looking), **columns = "
        "keys** (the tokens looked at). " + pieces.word_note(tok)
    )

    tgt_inputs = strip_eos(all_ids, cfg.eos_id)  # <eos> is an output, never a decoder input
    # one traced forward pass per sentence, shared by every visitor; every label below is a piece as shown (GPT-2's Ġ
    # as ␣)
    raw_trace, trace = state.traced(ckpt, src, tgt_inputs)

    # --- shared controls: kind, layer, head, word level -------------------------------------------------------------
    kinds = trace.kinds
    # the Head box wide enough for "mean over heads" at 1280 px
    c1, c2, c3, c4 = st.columns([2.6, 1, 1.3, 1], vertical_alignment="bottom")
    # Each control: the session's value, else the link's (clamped, with a note), else the default; then into the link.
    url.init_widget(
        "at_kind",
        lambda p: url.choice_param(p, "kind", kinds, kinds[-1], what="attention kind"),
        valid=lambda k: k in kinds,
    )
    kind = c1.radio("Attention", kinds, format_func=lambda k: KIND_SHORT[k], horizontal=True, key="at_kind")
    n_layers = trace.attention[kind].shape[0]
    open_layer = model_card.opening_layer(ckpt.card, n_layers)  # the card may name one that shows more than the last
    url.init_widget(
        "at_layer", lambda p: url.index_param(p, "layer", n_layers, open_layer), valid=lambda v: v in range(n_layers)
    )
    url.init_widget(
        "at_head",
        lambda p: url.head_param(p, "head", cfg.n_heads, "all"),
        valid=lambda h: h in ("all", "mean") or h in range(cfg.n_heads),
    )
    url.init_widget("at_words", lambda p: url.bool_param(p, "words", False, what="word level"))
    layer = c2.selectbox("Layer", list(range(n_layers)), format_func=lambda i: f"layer {i + 1}", key="at_layer")
    head = c3.selectbox("Head", ["all"] + list(range(cfg.n_heads)) + ["mean"], key="at_head", format_func=head_name)
    words = c4.toggle(
        "Word level",
        key="at_words",
        help="Merge pieces into words: sum over a word's key pieces, mean over its query pieces (rows still sum to 1).",
    )
    url.put("kind", kind, kinds[-1])  # defaults stay out of the link: it says only what differs from a visit
    url.put("layer", layer + 1, open_layer + 1)
    url.put("head", url.format_head(head), "all")
    url.put("words", words, False)

    view = views.make_view(trace, kind, layer, head, words)
    # weights [heads, q, k]
    q_labels, k_labels, causal, weights = view.q_labels, view.k_labels, view.causal, view.weights
    guide.info(kind_note(kind, len(q_labels), len(k_labels), translation=cfg.is_encoder_decoder))

    # the open tab is kept in the link like every other choice (ui/url.py: a bad ?tab= is noted), and only it runs
    ATTENTION.tab.init(lambda p: url.choice_param(p, "tab", TABS, TABS[0]), valid=lambda t: t in TABS)
    tab_heads, tab_tokens, tab_qk, tab_grid, tab_summary, tab_stats, tab_ablation, tab_compare = st.tabs(
        TABS, key=ATTENTION.tab.key, on_change="rerun"
    )
    ATTENTION.tab.put(st.session_state[ATTENTION.tab.key], TABS[0])

    # --- Heads ------------------------------------------------------------------------------------------------------
    if tab_heads.open:
        with tab_heads:
            if head == "all":
                # two charts a row, so that heads read 1 2 / 3 4; one a row, page-wide, when half a row cannot
                # label every key of a long sentence; one a row on a phone, laid out for its width
                phone = responsive.is_phone()
                per_row = 2 if not phone and heatmap_fits(q_labels, k_labels, HALF_PX) else 1
                width = responsive.PHONE_FIGURE_PX if phone else HALF_PX if per_row == 2 else PAGE_PX
                for h in range(weights.shape[0]):
                    if h % per_row == 0:
                        cols = st.columns(per_row)
                    with cols[h % per_row]:
                        plot(
                            shared(
                                attention_heatmap,
                                weights[h],
                                q_labels,
                                k_labels,
                                causal=causal,
                                width=width,
                                title=view_title(kind, layer, h, words),
                            ),
                            key=f"at_chart_hm_{kind}_{layer}_{h}",
                        )
            else:
                w, _ = view.one_head()
                plot(
                    shared(
                        attention_heatmap,
                        w,
                        q_labels,
                        k_labels,
                        causal=causal,
                        height=620,
                        width=responsive.figure_px(PAGE_PX),
                        title=view_title(kind, layer, head, words),
                    )
                )

    # --- the reading tabs (app_pages/attention/reading_tabs.py) -----------------------------------------------------
    if tab_tokens.open:
        with tab_tokens:
            reading.tokens_tab(view)
    if tab_qk.open:
        with tab_qk:
            attention_qk.qk_tab(ckpt, src, tgt_inputs, raw_trace, trace, view)
    if tab_grid.open:
        with tab_grid:
            reading.grid_tab(view)
    if tab_summary.open:
        with tab_summary:
            reading.summaries_tab(trace, view)
    if tab_stats.open:
        with tab_stats:
            reading.stats_tab(trace, view)

    # --- Ablation and Compare (app_pages/attention/tabs.py) ---------------------------------------------------------
    if tab_ablation.open:
        with tab_ablation:
            ablation_tab(ckpt, src, all_ids, output_ids, view)
    if tab_compare.open:
        with tab_compare:
            compare_tab(ckpt, src, tgt_inputs, view)

    # --- tokens and export ------------------------------------------------------------------------------------------
    with st.expander("Tokens, ids and export"):
        st.write("Source:", " ".join(f"{t}({i})" for t, i in zip(trace.src_tokens, trace.src_ids, strict=True)))
        st.write("Decoder inputs:", " ".join(f"{t}({i})" for t, i in zip(trace.tgt_tokens, trace.tgt_ids, strict=True)))
        st.download_button(  # the file is made when asked for, not at every click of every visitor
            "Download the attention tensors (.npz)",
            data=views.made_from_trace_when_asked(ckpt, src, tgt_inputs, raw_trace, views.attention_npz),
            file_name="attention.npz",
            mime="application/octet-stream",
            key="at_export_trace",
            on_click="ignore",
            icon=":material/download:",
            help="One float32 array [layers, heads, queries, keys] per kind (" + ", ".join(kinds) + ") plus the tokens "
            "and ids; load with numpy.load. Piece level, whatever the word-level switch says.",
        )
        st.caption("Every chart's camera button (top right, on hover) saves it as SVG.")


attention_page()
