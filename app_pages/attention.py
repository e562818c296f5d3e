"""Page "Attention": every head of every layer for the current sentence and its translation."""

import streamlit as st

from model.trace import KIND_TITLES, trace_pair
from ui import state
from viz.attention import attention_heatmap, display_token

ckpt = state.require_checkpoint()
tok, cfg = ckpt.tokenizer, ckpt.config

SHORT_TITLES = {"encoder": "Encoder self", "decoder": "Decoder self (masked)", "cross": "Cross (decoder → encoder)",
                "self": "Self (masked)"}

st.title("Attention")
st.caption("Each heatmap is one attention head: **rows = queries** (the token doing the looking), "
           "**columns = keys** (the tokens looked at); every row sums to 1. Hover a cell for the pair and its weight.")

typed = st.text_input("English sentence", value=state.current_text(), key="attn_text")
state.set_text(typed)
src = state.source_for(ckpt, typed)
if src is None:
    st.stop()
all_ids, output_ids = state.full_translation(ckpt, src)
st.markdown(f"**Translation:** {tok.decode(output_ids) or '(empty output)'}")

# The decoder's inputs are <bos> + the generated tokens (the final <eos> is an output, never an input).
tgt_inputs = all_ids[:-1] if len(all_ids) > 1 and all_ids[-1] == cfg.eos_id else all_ids
trace = trace_pair(ckpt.model, tok, src.ids, tgt_inputs, src.offsets)

kinds = trace.kinds
kind_param = st.query_params.get("kind", kinds[-1])
c1, c2, c3 = st.columns([2, 1, 1])
kind = c1.radio("Attention", kinds, index=kinds.index(kind_param) if kind_param in kinds else len(kinds) - 1,
                format_func=lambda k: SHORT_TITLES[k], horizontal=True, key="attn_kind")
n_layers = trace.attention[kind].shape[0]
layer = c2.selectbox("Layer", list(range(n_layers)), index=n_layers - 1, format_func=lambda i: f"layer {i + 1}",
                     key="attn_layer")
head_opts = ["all"] + list(range(cfg.n_heads)) + ["mean"]
head = c3.selectbox("Head", head_opts, key="attn_head",
                    format_func=lambda h: {"all": "all heads", "mean": "mean over heads"}[h] if isinstance(h, str) else f"head {h + 1}")
st.query_params["kind"] = kind

q_labels, k_labels = trace.labels(kind)
causal = kind in ("decoder", "self")
weights = trace.attention[kind][layer]  # [heads, q, k]
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

if head == "all":
    for h in range(weights.shape[0]):
        if h % 2 == 0:  # one row of two charts at a time, so that heads read 1 2 / 3 4
            cols = st.columns(2)
        with cols[h % 2]:
            st.plotly_chart(
                attention_heatmap(weights[h], q_labels, k_labels, title=f"{KIND_TITLES[kind]} · layer {layer + 1} · "
                                  f"head {h + 1}", causal=causal),
                width="stretch", theme=None, key=f"hm_{kind}_{layer}_{h}",
            )
else:
    w = weights.mean(0) if head == "mean" else weights[head]
    name = "mean over heads" if head == "mean" else f"head {head + 1}"
    st.plotly_chart(
        attention_heatmap(w, q_labels, k_labels, title=f"{KIND_TITLES[kind]} · layer {layer + 1} · {name}",
                          causal=causal, height=620),
        width="stretch", theme=None,
    )

with st.expander("Tokens and ids"):
    st.write("Source:", " ".join(f"{display_token(t)}({i})" for t, i in zip(trace.src_tokens, trace.src_ids)))
    st.write("Decoder inputs:", " ".join(f"{display_token(t)}({i})" for t, i in zip(trace.tgt_tokens, trace.tgt_ids)))
