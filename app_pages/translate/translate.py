"""Page "Translate": type a sentence, read the translation, and step through its decoding token by token."""

import html
import math

import streamlit as st

from charts.next_token import top_tokens_html
from decoding.decoded import StepView
from decoding.loops import LOOP_TIMES, find_loop
from reading_views import attribution as attribution_view
from reading_views import lens as lens_view
from serving import figures
from ui import checkpoints, model_card, pieces, state, url, widgets
from ui.page_state import TRANSLATE
from viz.attention import alignment_html, highlight_tokens_html, tokens_html


def _model(ckpt) -> tuple:
    """``(tokenizer, config, decoder layers, the layer the page opens on)`` of a loaded checkpoint."""
    n_layers = ckpt.config.n_decoder_layers
    return ckpt.tokenizer, ckpt.config, n_layers, model_card.opening_layer(ckpt.card, n_layers)


def about(ckpt) -> None:
    """What the page shows and how good the model is: below the step view (at step 0, right under the buttons)."""
    if ckpt.config.arch == "decoder-only":
        st.caption(
            "This checkpoint is a GPT-style language model: it has no encoder and translates nothing; it "
            "continues your English prompt. Step through the decoding: at every step the model scores every "
            "token of its vocabulary, the most probable one is taken (greedy decoding), and masked "
            "self-attention shows which earlier tokens it looked at to choose it."
        )
    else:
        st.caption(
            f"English → German with {model_card.who_computes(ckpt)}. Step through the decoding: at every step "
            "the model "
            "scores every token of its vocabulary, the most probable one is taken (greedy decoding), and "
            "cross-attention shows which English pieces the decoder looked at to choose it."
        )
        if quality := model_card.quality_line(ckpt):
            st.caption(quality)


def attention_view(ckpt, view: StepView, src) -> None:
    """The right column at one step: the source pieces before the first step; from step 1 on, the layer and head
    boxes, the attention of the newest token and the alignment so far.

    Not a fragment of its own (nor are the lens and the attribution view beside it): Streamlit deep-copies the stack
    of containers around a nested fragment each time the page draws it, which cost every Next click about 2 ms of
    the server's interpreter for the three of them (py-spy), while a change of layer or head, which a fragment made
    cheaper, is rarer than a step. That change now reruns the page fragment, as a step does."""
    tok, cfg, n_layers, open_layer = _model(ckpt)
    step = view.step
    if step == 0:
        url.put("layer", st.session_state["tr_layer"] + 1, open_layer + 1)
        url.put("head", url.format_head(st.session_state["tr_head"]), "mean")
        st.markdown(
            "**Source pieces** (encoder input, after tokenization)"
            if cfg.is_encoder_decoder
            else "**Prompt pieces** (after tokenization, behind `<bos>`; this decoder-only model continues them)"
        )
        # what the model is fed: the encoder reads the source with <eos>; a prompt goes in without it
        st.markdown(
            tokens_html(pieces.shown(tok, src.tokens) if cfg.is_encoder_decoder else pieces.of_ids(tok, view.prefix)),
            unsafe_allow_html=True,
        )
        st.info("Press **Next** to let the decoder produce its first token.")
        return
    record = view.records[step - 1]
    c1, c2 = st.container(key="tr_box_layer_head").columns(2)  # side by side on a phone too (ui.responsive)
    layer = c1.selectbox("Layer", list(range(n_layers)), format_func=lambda i: f"decoder layer {i + 1}", key="tr_layer")
    head = c2.selectbox(
        "Head",
        ["mean"] + list(range(cfg.n_heads)),
        key="tr_head",
        format_func=lambda h: "mean over heads" if h == "mean" else f"head {h + 1}",
    )
    url.put("layer", layer + 1, open_layer + 1)
    url.put("head", url.format_head(head), "mean")
    if record.cross_attention is not None:
        st.markdown(f"**Cross-attention of step {step}** — which source pieces the new token looked at")
        row, keys = record.cross_attention[layer], pieces.shown(tok, src.tokens)
    else:  # a decoder-only model has no encoder: show its masked self-attention over the prefix instead
        st.markdown(f"**Masked self-attention of step {step}** — which earlier pieces the new token looked at")
        row = record.self_attention[layer]
        keys = pieces.of_ids(tok, view.tokens[: row.shape[-1]])
    weights = row[head] if isinstance(head, int) else row.mean(0)  # "mean" or a head
    st.markdown(
        highlight_tokens_html(keys, weights, caption="Shade = attention weight; outlined = the strongest piece."),
        unsafe_allow_html=True,
    )
    matrix = view.cross_attention_matrix()
    if matrix is not None:
        matrix = matrix[layer][head] if isinstance(head, int) else matrix[layer].mean(0)
        # an HTML grid, not a Plotly heatmap: the page loads no Plotly and redraws nothing heavy per click; built
        # once per step, layer and head for the room (serving.figures), whose visitors redraw the same few
        st.markdown(
            figures.shared(
                alignment_html,
                matrix,
                pieces.of_ids(tok, view.generated),
                pieces.shown(tok, src.tokens),
                title="Alignment so far: generated × source pieces",
            ),
            unsafe_allow_html=True,
        )


@st.fragment
def translate_page() -> None:
    """The whole page below the sidebar, as a fragment: a Next, Back, layer or head click reruns this, not the app
    around it (the navigation, the sidebar's picker and summary), so a click costs the server only the page.

    Two columns from the top: on the left the sentence, the output, the step buttons and the 10 most probable next
    tokens; on the right the attention of the current token. At 1280×720 a lecturer clicks Next and sees both, the
    choice and where the model looked, without scrolling: what explains the page comes after the step's numbers.
    """
    # The model is loaded in here, not before: this fragment then exists in a new session from the first moment of
    # its first run. A visitor whose worker died is reconnected to another, where that run loads the model for
    # seconds while the old page is still on screen; a Next clicked then asked for a fragment the session did not
    # have yet, and Streamlit dropped the click. (It still drops one clicked in the moment before the new run
    # reaches this fragment: the title is drawn first, so the page shows when the fragment is there.)
    left, right = st.columns([1.1, 1], gap="medium")
    # Four keyed groups: on a phone the columns stack, and ui.responsive puts the step's view (tr_box_view) right
    # under the step's numbers (tr_box_main), before what explains them (tr_box_notes), instead of after all of the
    # left column
    main = left.container(key="tr_box_main")
    main.title("Translate")
    ckpt = checkpoints.require_checkpoint(summary=False)
    tok, cfg, n_layers, open_layer = _model(ckpt)
    with main:
        # --- input: the box applies on Enter; the presets box follows it --------------------------------------
        typed = state.sentence_box(ckpt, TRANSLATE.text_box)
        state.set_text(typed)
        src = state.source_for(ckpt, typed, brief=True)  # a two-line warning: the ten next tokens stay above 720 px
        if src is None:
            about(ckpt)
            return

        # The decoding is run to its end once (cached, shared, never changed); the session keeps only the step
        # number, and each run draws the view of that step. A click's run may overlap the previous one: neither
        # can disturb the other.
        run = state.greedy_run(ckpt, src)
        total_steps = len(run.records)  # tokens generated until <eos> (or the length limit)
        step = state.current_step(total_steps)
        view = StepView.of(run, step)
        # Only what is generated up to this step, as in the Decoding lab: the whole translation shown before the
        # first Next told the class the answer before the steps that explain it. Run to end shows it all.
        output = tok.decode(view.output_ids())
        # a continuation reads on from its prompt, shown greyed before it
        widgets.output_box(
            output,
            prompt="" if ckpt.config.is_encoder_decoder else src.text,
            empty=widgets.BEFORE_FIRST_STEP,
            more=step < total_steps,
        )

        # --- step-through: a step button reruns this fragment. A click that arrives during its run interrupts
        # the run and counts (the buttons move the step relatively, in callbacks: _move_step) ------------------
        # From step 1 on the status line heads the list of next tokens and the cache's size goes under it (one line
        # less: at 1280×720 the tenth token stays on the first screen under a long output)
        cache = f"KV cache: {view.cache_nbytes()['total'] / 1024:.1f} KiB"
        widgets.step_buttons(
            TRANSLATE.step.key,
            step,
            total_steps,
            at_end=step >= total_steps,
            status=f"**Step {step} of {total_steps}** · " + ("the 10 most probable next tokens" if step else cache),
        )
        if step:
            record = view.records[step - 1]
            ids, probs = record.top(10)
            chosen = ids.index(record.token_id) if record.token_id in ids else None
            # HTML bars, not a chart: nothing for Plotly to redraw on each click
            st.markdown(top_tokens_html(pieces.of_ids(tok, ids), probs, chosen), unsafe_allow_html=True)
            logp = float(sum(math.log(max(r.prob, 1e-12)) for r in view.records))
            how = (
                f"forced: {widgets.FORCED_AT_CAP} Greedy would have taken **{html.escape(pieces.of_id(tok, ids[0]))}**"
                if record.forced
                else "greedy: the most probable token"
            )
            st.caption(
                f"Chosen: **{html.escape(pieces.of_id(tok, record.token_id))}** with "
                f"p = {record.prob:.3f} ({how}). Sequence log-probability so far: "
                f"{logp:.2f} (the sum of log p of each chosen token). {cache}."
            )
    with left, st.container(key="tr_box_notes"):
        if step:
            st.markdown("**Generated so far** (decoder output; the newest token is outlined)")
            st.markdown(tokens_html(pieces.of_ids(tok, view.generated), current=step - 1), unsafe_allow_html=True)
        # Say why, rather than leave the reader to wonder at "own own own own"; under the step's numbers, which
        # stay on a projector's first screen
        if loop := find_loop(output):
            st.info(loop.message("translation" if cfg.is_encoder_decoder else "continuation"))
            if cfg.is_encoder_decoder:  # what the fix gives: the same greedy decoding, forbidden to loop
                st.markdown(
                    f"**With the loop guard** (greedy, but a token that would write a phrase {LOOP_TIMES} "
                    f"times in a row is never chosen): {html.escape(state.guarded_translation(ckpt, src))}"
                )
        about(ckpt)

    # The layer and head shown from step 1 on: read from the link now, so that a bad value is noted at once.
    with right, st.container(key="tr_box_view"):
        url.init_widget(
            "tr_layer",
            lambda p: url.index_param(p, "layer", n_layers, open_layer),
            valid=lambda v: v in range(n_layers),
        )
        url.init_widget(
            "tr_head",
            lambda p: url.head_param(p, "head", cfg.n_heads, "mean", ("mean",)),
            valid=lambda h: h == "mean" or h in range(cfg.n_heads),
        )
        # The lens's toggle (?lens=1) and table first: on the first screen beside the Next button, so that stepping
        # with the lens on needs no scrolling (under the attention, it began below a projector's 720 px)
        lens_view.translate_lens(ckpt, src.ids, run, step)
        attention_view(ckpt, view, src)
    with right, st.container(key="tr_box_attr"):
        attribution_view.translate_attribution(ckpt, src, run, step)  # a toggle (?attr=1): attention vs attribution


translate_page()
checkpoints.require_checkpoint()  # the sidebar's summary of the model (a fragment cannot write to the sidebar)
