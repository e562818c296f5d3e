"""Page "Translate": type a sentence, read the translation, and step through its decoding token by token."""

import html
import math

import streamlit as st

from ui import state, url, widgets
from ui.decoding_lab import StepView
from viz.attention import alignment_heatmap, display_token, highlight_tokens_html, tokens_html
from viz.decoding import top_tokens_html

ckpt = state.require_checkpoint()
tok = ckpt.tokenizer

# Two columns from the top (issue 14): the sentence, the output and the step buttons on the left, the attention
# of the current token on the right, so that at 1280×720 a lecturer clicks Next and sees the answer unscrolled.
left, right = st.columns([1.1, 1], gap="medium")
with left:
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
        if quality := state.quality_line(ckpt):
            st.caption(quality)

    # --- input: the box applies on Enter; the presets box follows it --------------------------------------
    typed = state.sentence_box(ckpt, text_key="text_input", preset_key="preset")
    state.set_text(typed)
    src = state.source_for(ckpt, typed)
    if src is None:
        st.stop()

    # The decoding is run to its end once (cached, shared, never changed); the session keeps only the step
    # number, and each run draws the view of that step. A click's run may overlap the previous one: neither
    # can disturb the other.
    run = state.greedy_run(ckpt, src)
    # a continuation reads on from its prompt, shown greyed before it
    widgets.output_box(tok.decode(run.output_ids()), prompt="" if ckpt.config.is_encoder_decoder else src.text)


# Everything below the output box is the step view: a fragment, so that a click on a step button or a change of
# layer/head reruns only it (issue 14): the input, the output box and the sidebar are neither rebuilt by the
# script nor re-sent to the browser. It writes into the two columns made above.
@st.fragment
def step_view(run, src) -> None:
    """Draw step ``st.session_state["step"]`` of ``run`` (the cached greedy decoding of ``src`` to its end, from
    :func:`ui.state.greedy_run`: read, never stepped) into the page's ``left`` and ``right`` columns."""
    total_steps = len(run.records)  # tokens generated until <eos> (or the length limit)
    step = state.current_step(total_steps)
    view = StepView.of(run, step)
    with left:
        st.subheader("Step through the decoding")
        widgets.step_buttons("step", step, total_steps, at_end=step >= total_steps,
                             status=f"**Step {step} of {total_steps}** · KV cache: "
                                    f"{view.cache_nbytes()['total'] / 1024:.1f} KiB")
        st.markdown("**Generated so far** (decoder output; the newest token is outlined)")
        st.markdown(tokens_html(tok.tokens(view.generated), current=step - 1 if step else None),
                    unsafe_allow_html=True)
    if step == 0:
        url.put("layer", st.session_state["tr_layer"] + 1, n_layers)
        url.put("head", url.format_head(st.session_state["tr_head"]), "mean")
        with right:
            st.markdown("**Source pieces** (encoder input, after BPE)" if cfg.is_encoder_decoder
                        else "**Prompt pieces** (after BPE, behind `<bos>`; this decoder-only model continues them)")
            # what the model is fed: the encoder reads the source with <eos>; a prompt goes in without it
            st.markdown(tokens_html(src.tokens if cfg.is_encoder_decoder else tok.tokens(view.prefix)),
                        unsafe_allow_html=True)
            st.info("Press **Next** to let the decoder produce its first token.")
        return
    record = view.records[step - 1]
    with left:
        ids, probs = record.top(10)
        chosen = ids.index(record.token_id) if record.token_id in ids else None
        st.markdown(top_tokens_html(tok.tokens(ids), probs, chosen,
                                    title=f"Step {step}: the 10 most probable next tokens"), unsafe_allow_html=True)
        st.caption(f"Chosen: **{html.escape(display_token(tok.id_to_token(record.token_id)))}** with "
                   f"p = {record.prob:.3f} (greedy: the most probable token).")
        logp = float(sum(math.log(max(r.prob, 1e-12)) for r in view.records))
        st.caption(f"Sequence log-probability so far: {logp:.2f} (sum of log p of each chosen token).")
    with right:
        c1, c2 = st.columns(2)
        layer = c1.selectbox("Layer", list(range(n_layers)), format_func=lambda i: f"decoder layer {i + 1}",
                             key="tr_layer")
        head = c2.selectbox("Head", ["mean"] + list(range(cfg.n_heads)), key="tr_head",
                            format_func=lambda h: "mean over heads" if h == "mean" else f"head {h + 1}")
        url.put("layer", layer + 1, n_layers)
        url.put("head", url.format_head(head), "mean")
        if record.cross_attention is not None:
            st.markdown(f"**Cross-attention of step {step}** — which source pieces the new token looked at")
            row, keys = record.cross_attention[layer], src.tokens
        else:  # a decoder-only model has no encoder: show its masked self-attention over the prefix instead
            st.markdown(f"**Masked self-attention of step {step}** — which earlier pieces the new token looked at")
            row = record.self_attention[layer]
            keys = tok.tokens(view.tokens[: row.shape[-1]])
        weights = row.mean(0) if head == "mean" else row[head]
        st.markdown(highlight_tokens_html(keys, weights,
                                          caption="Shade = attention weight; outlined = the strongest piece."),
                    unsafe_allow_html=True)
        matrix = view.cross_attention_matrix()
        if matrix is not None:
            matrix = matrix[layer].mean(0) if head == "mean" else matrix[layer][head]
            fig = alignment_heatmap(matrix, tok.tokens(view.generated), src.tokens,
                                    title="Alignment so far: generated × source pieces")
            # at most ~420 px high, so that it stays on screen beside the step buttons at 1280×720
            fig.update_layout(height=min(fig.layout.height or 420, 420), margin_t=40)
            widgets.show_figure(fig)


# The layer and head shown from step 1 on: read from the link now, so that a bad value is noted at once.
cfg = ckpt.config
n_layers = cfg.n_decoder_layers
with right:
    url.init_widget("tr_layer", lambda p: url.index_param(p, "layer", n_layers, n_layers - 1),
                    valid=lambda v: v in range(n_layers))
    url.init_widget("tr_head", lambda p: url.head_param(p, "head", cfg.n_heads, "mean", ("mean",)),
                    valid=lambda h: h == "mean" or h in range(cfg.n_heads))
step_view(run, src)
