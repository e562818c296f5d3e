"""Page "Translate": type a sentence, read the translation, and step through its decoding token by token."""

import html

import streamlit as st
import torch

from ui import state
from viz.attention import alignment_heatmap, display_token, highlight_tokens_html, tokens_html
from viz.decoding import top_tokens_bar

ckpt = state.require_checkpoint()
tok = ckpt.tokenizer

st.title("Translate")
if ckpt.config.arch == "decoder-only":
    st.caption("This checkpoint is a GPT-style language model: it has no encoder and translates nothing; it "
               "continues your English prompt. Step through the decoding: at every step the model scores every "
               "token of its vocabulary, the most probable one is taken (greedy decoding), and masked "
               "self-attention shows which earlier tokens it looked at to choose it.")
else:
    st.caption("English → German with our own Transformer. Step through the decoding: at every step the model "
               "scores every token of its vocabulary, the most probable one is taken (greedy decoding), and "
               "cross-attention shows which English pieces the decoder looked at to choose it.")

# --- input ------------------------------------------------------------------------------------------
presets = state.presets_for(ckpt)
text = state.current_text(ckpt)
if "text_input" not in st.session_state:
    st.session_state["text_input"] = text


def _use_preset() -> None:
    choice = st.session_state["preset"]
    if choice in presets:
        st.session_state["text_input"] = choice


col_preset, col_text = st.columns([1, 2])
preset_options = ["(your own sentence)"] + presets
col_preset.selectbox(
    "Lecture presets", preset_options, key="preset", on_change=_use_preset,
    index=preset_options.index(text) if text in presets else 0,
)
typed = col_text.text_area(state.input_label(ckpt), key="text_input", height=80, max_chars=None)
state.set_text(typed)
src = state.source_for(ckpt, typed)
if src is None:
    st.stop()

all_ids, output_ids = state.full_translation(ckpt, src)
output_html = html.escape(tok.decode(output_ids)) or "<i>(empty output)</i>"
if not ckpt.config.is_encoder_decoder:  # a continuation reads on from its prompt, shown greyed before it
    output_html = f'<span style="color:#8a8f98">{html.escape(src.text)}</span> {output_html}'
st.markdown(
    f'<div style="font-size:1.6rem;padding:0.6rem 1rem;border-left:6px solid #e4572e;background:#fff7f3;'
    f'border-radius:4px;margin:0.2rem 0 0.6rem 0">{output_html}</div>',
    unsafe_allow_html=True,
)

# --- step-through -------------------------------------------------------------------------------------
stepper = state.stepper_for(ckpt, src)
total_steps = len(all_ids) - len(stepper.prefix)  # tokens generated until <eos> (or the length limit)
step = min(state.current_step(), total_steps)
stepper.goto(step)

st.subheader("Step through the decoding")
# The buttons move the step in on_click callbacks, which run before this script: the page (and the buttons'
# enabled/disabled state) is then drawn for the new step in the same run.
b1, b2, b3, b4, info = st.columns([1, 1, 1, 1.3, 3])
# Material icons, not emoji: a lecture-room PC may have no emoji font.
b1.button("Reset", icon=":material/first_page:", width="stretch", disabled=step == 0, on_click=state.set_step,
          args=(0,))
b2.button("Back", icon=":material/chevron_left:", width="stretch", disabled=step == 0, on_click=state.set_step,
          args=(step - 1,))
b3.button("Next", icon=":material/chevron_right:", width="stretch", type="primary", disabled=step >= total_steps,
          on_click=state.set_step, args=(step + 1,))
b4.button("Run to end", icon=":material/last_page:", width="stretch", disabled=step >= total_steps,
          on_click=state.set_step, args=(total_steps,))
if step != st.session_state.get("step"):  # e.g. ?step=99999 clamped to the last step
    state.set_step(step)
info.markdown(f"**Step {step} of {total_steps}** · KV cache: "
              f"{stepper.cache.nbytes()['total'] / 1024:.1f} KiB")

st.markdown("**Generated so far** (decoder output; the newest token is outlined)")
st.markdown(tokens_html(tok.tokens(stepper.generated), current=step - 1 if step else None), unsafe_allow_html=True)

if step == 0:
    st.markdown("**Source pieces** (encoder input, after BPE)" if ckpt.config.is_encoder_decoder
                else "**Prompt pieces** (after BPE, behind `<bos>`; this decoder-only model continues them)")
    # what the model is fed: the encoder reads the source with <eos>; a prompt goes in without it
    st.markdown(tokens_html(tok.tokens(stepper.prefix) if not ckpt.config.is_encoder_decoder else src.tokens),
                unsafe_allow_html=True)
    st.info("Press **Next** to let the decoder produce its first token.")
    st.stop()

record = stepper.records[step - 1]
cfg = ckpt.config
left, right = st.columns([1, 1.25])
with left:
    ids, probs = record.top(10)
    chosen = ids.index(record.token_id) if record.token_id in ids else None
    st.plotly_chart(
        top_tokens_bar(tok.tokens(ids), probs, chosen, title=f"Step {step}: the 10 most probable next tokens"),
        width="stretch", theme=None,
    )
    st.caption(f"Chosen: **{html.escape(display_token(tok.id_to_token(record.token_id)))}** with p = {record.prob:.3f} "
               "(greedy: the most probable token).")
with right:
    c1, c2 = st.columns(2)
    layer = c1.selectbox("Layer", list(range(cfg.n_decoder_layers)), index=cfg.n_decoder_layers - 1,
                         format_func=lambda i: f"decoder layer {i + 1}", key="tr_layer")
    head_opts = ["mean"] + list(range(cfg.n_heads))
    head = c2.selectbox("Head", head_opts, key="tr_head",
                        format_func=lambda h: "mean over heads" if h == "mean" else f"head {h + 1}")
    if record.cross_attention is not None:
        st.markdown(f"**Cross-attention of step {step}** — which source pieces the new token looked at")
        row, keys = record.cross_attention[layer], src.tokens
    else:  # a decoder-only model has no encoder: show its masked self-attention over the prefix instead
        st.markdown(f"**Masked self-attention of step {step}** — which earlier pieces the new token looked at")
        row = record.self_attention[layer]
        keys = tok.tokens(stepper.tokens[: row.shape[-1]])
    weights = row.mean(0) if head == "mean" else row[head]
    st.markdown(highlight_tokens_html(keys, weights,
                                      caption="Shade = attention weight; outlined = the strongest piece."),
                unsafe_allow_html=True)
    matrix = stepper.cross_attention_matrix()
    if matrix is not None:
        matrix = matrix[layer].mean(0) if head == "mean" else matrix[layer][head]
        st.plotly_chart(
            alignment_heatmap(matrix, tok.tokens(stepper.generated), src.tokens,
                              title="Alignment so far<br><sup>rows = generated tokens (queries), columns = source pieces (keys)</sup>"),
            width="stretch", theme=None,
        )

logp = float(sum(torch.log(torch.tensor(max(r.prob, 1e-12))) for r in stepper.records))
st.caption(f"Sequence log-probability so far: {logp:.2f} (sum of log p of each chosen token).")
