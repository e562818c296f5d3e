"""Page "Decoding lab": how the next token is chosen (greedy, temperature, top-k, top-p, seed), forcing a token
and comparing the branches, beam search as a tree, and what the KV cache holds and saves."""

import streamlit as st

from app_pages.decoding import kv_cache, lab, views
from decoding.beam import beam_search, beam_states
from decoding.decoded import Decoding, StepView
from decoding.loops import LOOP_TIMES
from decoding.sampling import SamplingConfig, SamplingError
from model.hf.generation import decoding_cap, forced_eos
from reading_views import attribution as attribution_view
from reading_views import lens as lens_view
from serving import heavy
from ui import checkpoints, pieces, state, url, widgets
from ui.page_state import DECODING
from viz.attention import tokens_html

ckpt = checkpoints.require_checkpoint()
tok, cfg = ckpt.tokenizer, ckpt.config
ss = st.session_state


# Decodings are run to their end once, frozen and shared (serving.heavy: at most a few heavy computations at a time per
# process, each once); the session keeps only the step number (and the forced tokens), and every script run draws
# the view of its step. A click's run may overlap the previous one (Streamlit starts it at once), so nothing a run
# reads may be changed by another.
def lab_decoding(src_ids: tuple, sampling: SamplingConfig, forced: dict, max_new: int, loop_times: int) -> Decoding:
    """The finished, frozen decoding of ``src_ids`` under ``sampling`` with ``forced`` tokens (computed once)."""
    spec = (sampling.strategy, sampling.temperature, sampling.top_k, sampling.top_p, sampling.seed)
    forced_key = tuple(sorted(forced.items()))
    return heavy.shared(
        ("lab", *checkpoints.checkpoint_version(ckpt), src_ids, spec, forced_key, max_new, loop_times),
        lambda: lab.lab_decoding(
            ckpt.model, list(src_ids), sampling, dict(forced), max_new, forced_eos(ckpt.generation), loop_times
        ),
        "this decoding",
    )


def beam_run(src_ids: tuple, width: int, alpha: float, max_new: int, loop_times: int):
    """Beam search of ``src_ids`` and its states step by step, frozen (computed once)."""

    def compute():
        result = beam_search(ckpt.model, list(src_ids), width, alpha, max_new_tokens=max_new, loop_times=loop_times)
        return result, beam_states(result, alpha, cfg.eos_id)

    return heavy.shared(
        ("beam", *checkpoints.checkpoint_version(ckpt), src_ids, width, alpha, max_new, loop_times),
        compute,
        "the beam search",
    )


@st.fragment
def decoding_page() -> None:
    """The page below the sidebar, as a fragment: a step, a rule setting or a forced token reruns this, not the app
    around it (the navigation, the sidebar's picker and summary)."""
    # A projector shows 1280×720: the chart must start on the first screen. The title and the sentence share a row,
    # the output beside the step buttons, and the rule's controls stand in a narrow column beside the chart.
    head, sentence = st.columns([1.6, 3], vertical_alignment="bottom")
    head.title(
        "Decoding lab",
        help="At every step the decoder scores every token of its vocabulary; a *decoding "
        "rule* turns those scores into one token. Compare greedy decoding, sampling (temperature, top-k, "
        "top-p, with a seed so a run replays exactly) and beam search; force a token of your choice and see "
        "where the translation goes; and watch the KV cache that makes each step cheap.",
    )
    head.caption("How the next token is chosen, step by step.")

    # --- settings: read from the link on the first visit, then owned by the widgets ------------------------------
    if "dl_settings" not in ss:
        settings, notes = lab.settings_from_link(st.query_params, cfg.vocab_size, ckpt.generation)
        forced, forced_note = url.forced_param(st.query_params, "forced", cfg.vocab_size, cfg.max_len - 1)
        ss["dl_settings"] = settings
        ss["dl_forced"] = forced
        ss["dl_forced_branches"] = (forced,) if forced else ()
        url.show_notes(*notes, forced_note)
    for name, value in ss["dl_settings"].items():  # (re)create the widgets' state, e.g. after visiting another page
        ss.setdefault(f"dl_w_{name}", value)

    # --- sentence -------------------------------------------------------------------------------------------------
    with sentence:
        typed = state.sentence_box(ckpt, DECODING.text_box)
    state.set_text(typed)
    out_col, steps_col = st.columns(2)
    controls, main = st.columns([1, 2.7], gap="medium")

    # --- decoding rule --------------------------------------------------------------------------------------------
    strategy = controls.radio(
        "Decoding rule",
        lab.STRATEGIES,
        key="dl_w_strategy",
        format_func={"greedy": "greedy (argmax)", "sample": "sample (T, top-k, top-p)", "beam": "beam search"}.get,
    )
    sampling_off, beam_off = strategy != "sample", strategy != "beam"
    with controls:  # one under the other, beside the chart
        st.checkbox(
            "Loop guard",
            key="dl_w_guard",
            help=f"Never choose a token that would write a phrase "
            f"{LOOP_TIMES} times in a row: the loops of greedy decoding (“im im im”) cannot happen. A phrase "
            "may still come twice, or again later (fairseq's no_repeat_ngram_size bans that too).",
        )
        st.slider(
            "Temperature T",
            *lab.TEMPERATURE_RANGE,
            step=0.05,
            key="dl_w_temperature",
            disabled=sampling_off,
            help="Divide the logits by T before the softmax: T < 1 sharpens the distribution, T > 1 flattens it.",
        )
        st.number_input(
            "Top-k (0 = off)",
            min_value=0,
            max_value=cfg.vocab_size,
            step=1,
            key="dl_w_top_k",
            disabled=sampling_off,
            help="Keep only the k most probable tokens.",
        )
        st.slider(
            "Top-p (nucleus)",
            *lab.TOP_P_RANGE,
            step=0.05,
            key="dl_w_top_p",
            disabled=sampling_off,
            help="Keep the smallest set of most probable tokens whose probabilities add up to p (1 = off).",
        )
        st.number_input(
            "Seed",
            min_value=lab.SEED_RANGE[0],
            max_value=lab.SEED_RANGE[1],
            step=1,
            key="dl_w_seed",
            disabled=sampling_off,
            help="The same seed draws the same tokens again.",
        )
        st.slider("Beam width", *lab.BEAM_RANGE, step=1, key="dl_w_beam", disabled=beam_off)
        st.slider(
            "Length penalty α",
            *lab.ALPHA_RANGE,
            step=0.1,
            key="dl_w_alpha",
            disabled=beam_off,
            help="GNMT: score = log P / ((5 + length) / 6)^α; α = 0 compares raw log-probabilities.",
        )
        if ckpt.generation and (beam_note := ckpt.generation.beam_note()):  # a Hugging Face model's own defaults
            st.caption(beam_note)
    settings = {name: ss[f"dl_w_{name}"] for name in lab.DEFAULTS}
    ss["dl_settings"] = settings
    loop_times = LOOP_TIMES if settings["guard"] else 0

    def sync_url() -> None:
        """Settings and forced tokens into the link (defaults left out; the step is written by ``current_step``)."""
        for key, default in lab.lab_defaults(ckpt.generation).items():  # this model's own defaults stay out
            url.put(key, settings[key], default)
        url.put("forced", url.format_forced(ss["dl_forced"]), "")

    sync_url()
    with main:  # a note about the sentence, where the chart would be
        src = state.source_for(ckpt, typed)
    if src is None:
        st.stop()
    version = checkpoints.checkpoint_version(ckpt)
    src_key = (*version, tuple(src.ids))
    if ss.get("dl_src_key") not in (None, src_key):  # a new sentence (or model): start over
        ss["dl_step"], ss["dl_forced"], ss["dl_forced_branches"] = 0, {}, ()
        sync_url()
    ss["dl_src_key"] = src_key
    limit = decoding_cap(cfg, list(src.ids), ckpt.generation)  # as the Translate page's greedy decoding

    def lab_run(sampling: SamplingConfig, forced) -> Decoding:
        """The finished, frozen decoding of this sentence under ``sampling`` with ``forced`` tokens (shared). It is
        decoded here even for plain greedy, which the Translate page decodes too: the lab draws each step's whole
        pipeline from the step's [vocab] row, which a shared decoding no longer keeps (serving.memory)."""
        return lab_decoding(tuple(src.ids), sampling, forced, limit, loop_times)

    def step_controls(step: int, finished: bool, end: int, status: str) -> None:
        """Reset / Back / Next / Run to end (``end`` = the last step), and a status line."""
        widgets.step_buttons("dl_step", step, end, finished, status=f"**Step {step}** · {status}")

    # === beam search, step by step =================================================================================
    if strategy == "beam":
        try:
            result, states = beam_run(
                tuple(src.ids), int(settings["beam"]), float(settings["alpha"]), limit, loop_times
            )
        except SamplingError as exc:
            st.warning(f"{exc}.")
            st.stop()
        step = state.current_step(len(result.steps), key="dl_step")
        if not result.hypotheses:
            st.info("Beam search produced no hypothesis for this sentence.")
            st.stop()
        views.beam_view(
            ckpt,
            result,
            states,
            step,
            int(settings["beam"]),
            float(settings["alpha"]),
            out_col=out_col,
            steps_col=steps_col,
            main=main,
            step_controls=step_controls,
        )
        st.stop()

    # === greedy / sampling, step by step ==========================================================================
    try:
        sampling = lab.sampling_config(settings)
    except SamplingError as exc:  # the widgets keep values in range; this is a safety net
        st.warning(f"{exc}; using greedy decoding instead.")
        sampling = SamplingConfig("greedy")
    full = lab_run(sampling, ss["dl_forced"])
    step = state.current_step(full.n_steps, key="dl_step")  # e.g. ?step=999 clamped to where the decoding ends
    run = StepView.of(full, step)

    def _force(at_step: int, example: str, chosen: int | None) -> None:
        typed_piece = (ss.get("dl_force_text") or "").strip()
        if typed_piece:
            token_id = lab.resolve_piece(tok, typed_piece)
            if token_id is None:
                ss["dl_force_msg"] = (
                    f"“{lab.echo(typed_piece)}” is not a piece of this model's vocabulary. "
                    f"Pieces that start a word begin with {pieces.word_start(tok)} (e.g. "
                    f"{example}); pick one from the list, or try a shorter piece."
                )
                return
            ss["dl_force_text"] = ""
        elif chosen is None:  # the browser sent a choice that names no token: nothing is forced, and it says so
            ss["dl_force_msg"] = (
                "The list's choice could not be read (it changed with the step). Pick the token again, then force it."
            )
            return
        else:
            token_id = chosen
        forced = lab.forced_after(ss["dl_forced"], at_step, int(token_id))
        ss["dl_forced"] = forced
        if forced not in ss["dl_forced_branches"]:
            # a new tuple: a run reading the old one is undisturbed
            ss["dl_forced_branches"] = (*ss["dl_forced_branches"], forced)
        ss["dl_step"] = at_step

    def _clear_forced() -> None:
        ss["dl_forced"], ss["dl_forced_branches"] = {}, ()

    widgets.output_box(
        tok.decode(run.output_ids()),
        where=out_col,
        empty=widgets.BEFORE_FIRST_STEP if step == 0 else "(empty output)",
        more=not run.finished,
    )
    if run.finished:
        ended = run.records and run.records[-1].token_id == cfg.eos_id
        status = "finished (<eos>)" if ended else "length limit reached"
    else:
        status = "not finished"
    with steps_col:
        step_controls(
            step, run.finished, full.n_steps, f"{status} · KV cache {run.cache_nbytes()['total'] / 1024:.1f} KiB"
        )
    if step == 0:
        main.info("Press **Next** to let the decoder produce its first token: you will see how the rule picks it.")
    else:
        with main:
            views.step_chart(tok, run, step, sampling)
        with controls:  # under the rule's settings
            views.force_controls(tok, run.records[step - 1], step, on_force=_force)

    generated_box = main.container()  # under the chart: the tokens so far, newest outlined
    generated_box.markdown("**Generated so far**")
    generated_box.markdown(
        tokens_html(pieces.of_ids(tok, run.generated), current=step - 1 if step else None), unsafe_allow_html=True
    )
    if full.forced:
        generated_box.caption("Forced tokens: " + views.forced_caption(tok, full.forced_map))
        generated_box.button("Clear forced tokens and branches", icon=":material/delete_sweep:", on_click=_clear_forced)

    # --- branches ---------------------------------------------------------------------------------------------
    if ss["dl_forced_branches"]:
        st.subheader("Branches")
        branches = [{}] + [b for b in ss["dl_forced_branches"] if b]
        views.branches_view(ckpt, branches, [lab_run(sampling, forced).tokens_and_probs() for forced in branches])

    if step == 0:
        st.stop()

    # a decoder-only model has no cross-attention: its tab is about the probabilities alone
    tab_probs, tab_cache, tab_lens, tab_attr = st.tabs(
        [
            "Probabilities and cross-attention" if cfg.is_encoder_decoder else "Probabilities",
            "KV cache",
            lens_view.LABEL,
            attribution_view.LABEL,
        ]
    )
    with tab_probs:
        views.probabilities_tab(ckpt, run, pieces.shown(tok, src.tokens))
    with tab_cache:
        kv_cache.kv_cache_tab(ckpt, run, step, src.ids, pieces.shown(tok, src.tokens), cmp_key=(src_key, run.generated))
    with tab_lens:
        lens_view.lab_lens(ckpt, src.ids, full, step)
    with tab_attr:
        attribution_view.lab_attribution(ckpt, src, full, step)


decoding_page()
