"""The Decoding lab's larger views as Streamlit renderers: one step of the rule as a chart, the panel that forces a
token, beam search step by step, the forced-token branches and the probabilities tab (the KV-cache tab:
:mod:`app_pages.decoding.kv_cache`).

They draw what the page computed (a :class:`~decoding.decoded.StepView`, a beam result and its per-step states)
and own no state of their own except the force panel's widgets (``dl_force_choice_<step>_<list>``: a list of its
own per step and candidates, ``dl_force_text``, ``dl_force_msg``). The page (``app_pages/decoding/decoding.py``)
keeps the flow: settings, sentence, the decoding rule, and what forcing a token does.
"""

from __future__ import annotations

import dataclasses
import html
import math
import zlib
from typing import Callable, Sequence

import numpy as np
import pandas as pd
import streamlit as st
import torch

from app_pages.decoding import lab
from charts.beam import beam_tree_figure
from charts.next_token import pipeline_figure
from decoding.beam import BeamResult, length_penalty
from decoding.decoded import StepView
from decoding.loops import LOOP_TIMES
from decoding.sampling import SamplingConfig
from model.checkpoint import Checkpoint
from ui import pieces, widgets
from viz.attention import alignment_html

#: Candidates a step shows: the bars of its chart and the list a token is forced from are the same most probable ones.
TOP_CANDIDATES = 15
#: Decimals of every probability and log-probability in the lab's tables, as in its captions and force list.
DECIMALS = 3
#: Columns that hold token pieces: never cut off ("▁werde" read "▁wer…" in a narrow column).
TOKEN_COLUMNS = ("token", "+ token", "forced (step→token)")
#: Pixels per character of a table cell's text (14 px sans, generous for ▁ and capitals), and a cell's padding.
_CELL_CHAR_PX, _CELL_PAD_PX = 8.5, 30


def table_parts(rows: Sequence[dict]) -> tuple[pd.DataFrame, dict[str, str], dict[str, int]]:
    """What :func:`lab_table` shows, without Streamlit: ``(frame, formats, token_widths)``.

    One look for every table of the lab: each float column written with :data:`DECIMALS` decimals (a column
    read 0.761, 0.59 and 0.2271 when rounded values were left to the grid), booleans as ``yes`` / ``no`` (not
    ``true``), and the width (px) each column of :data:`TOKEN_COLUMNS` needs for its longest piece.
    """
    frame = pd.DataFrame(list(rows))
    formats, widths = {}, {}
    for column in frame.columns:
        values = frame[column]
        if values.map(lambda v: isinstance(v, (bool, np.bool_))).all() and len(values):
            frame[column] = values.map(lambda v: "yes" if v else "no")
        elif values.map(lambda v: isinstance(v, (float, np.floating))).all() and len(values):
            formats[column] = f"{{:.{DECIMALS}f}}"
        if column in TOKEN_COLUMNS:
            longest = max([len(str(v)) for v in values] + [len(column)])
            widths[column] = int(math.ceil(longest * _CELL_CHAR_PX + _CELL_PAD_PX))
    return frame, formats, widths


def lab_table(rows: Sequence[dict], where=None, *, wrap: bool = False, height: int | None = None):
    """A table of the lab (:func:`table_parts`: one number format, yes / no, whole tokens) through
    :func:`ui.widgets.show_table`. ``wrap``: a static table whose cells wrap (long translations)."""
    frame, formats, widths = table_parts(rows)
    extra = {} if wrap else {"column_config": {c: st.column_config.TextColumn(c, width=w) for c, w in widths.items()}}
    return widgets.show_table(frame, where, wrap=wrap, formats=formats, height=height, **extra)


def hypotheses_table(tok, hyps: Sequence, alpha: float) -> None:
    """Beam hypotheses as rows: translation, log P, length, the length penalty lp (Wu et al. 2016, eq. 14) and the
    score log P / lp."""
    # a static table: its cells wrap, where a dataframe's cut the translations off at the column's width
    lab_table(
        [
            {
                "rank": i + 1,
                "translation": tok.decode(h.tokens),
                "log P": float(h.log_prob),
                "length": len(h.tokens),
                "lp": float(length_penalty(len(h.tokens), alpha)),
                "score": float(h.score),
                "finished": bool(h.finished),
            }
            for i, h in enumerate(hyps)
        ],
        wrap=True,
    )


def step_chart(tok, run: StepView, step: int, sampling: SamplingConfig) -> None:
    """Step ``step`` (1 = the first generated token) of a greedy or sampled decoding: the rule's pipeline from the
    log-probabilities over the vocabulary to the chosen token (the :data:`TOP_CANDIDATES` most probable), and a line
    with the chosen token's probability under the model and after the rule, and what a forced token replaced."""
    record, pipe = run.records[step - 1], run.pipelines[step - 1]
    forced_here = run.forced_at(step)
    temperature = sampling.temperature if sampling.strategy == "sample" else None
    if record.banned:  # the rule saw −∞ for them; the chart shows what the model gave them, struck through
        ids = torch.tensor(record.banned)
        own = torch.tensor([record.log_prob(t) for t in record.banned])
        pipe = pipe.dense()  # a shared decoding keeps a slim pipeline: rebuilt here, for this one chart
        pipe = dataclasses.replace(
            pipe,
            logits=pipe.logits.index_put((ids,), own),
            scaled=pipe.scaled.index_put((ids,), own / (temperature or 1.0)),
        )
    widgets.show_figure(
        pipeline_figure(
            pipe,
            pieces.namer(tok),
            top=TOP_CANDIDATES,  # the stepper hands the rule log-probabilities
            temperature=temperature,
            forced=forced_here,
            scores="log p",
            banned=record.banned,
            title=f"Step {step}: from log-probabilities to the next token "
            f"({'forced' if forced_here else sampling.strategy})",
        ),
        key="dl_chart_pipeline",
    )
    chosen = html.escape(pieces.of_id(tok, record.token_id))
    line = (
        f"Token **{chosen}**: p = {record.prob:.{DECIMALS}f} under the model (T = 1), "
        f"{pipe.final_prob(record.token_id):.{DECIMALS}f} after the rule's reshaping."
    )
    if forced_here or record.forced:
        picked = html.escape(pieces.of_id(tok, run.suggested[step - 1]))
        line += (
            f" Forced by you; the rule had picked **{picked}**."
            if forced_here
            else f" Forced: {widgets.FORCED_AT_CAP} The rule had picked **{picked}**."
        )
    if record.banned:
        kept = ", ".join(
            f"**{html.escape(pieces.of_id(tok, t))}** (p = {math.exp(record.log_prob(t)):.{DECIMALS}f})"
            for t in record.banned
        )
        line += (
            f" The loop guard kept {kept} from the rule: it would have written a phrase {LOOP_TIMES} times in a row."
        )
    st.caption(
        line + " The first panel shows the log-probabilities the decoder returns: they differ from the "
        "raw logits by one constant per step, which the softmax ignores."
    )


def force_controls(tok, record, step: int, on_force: Callable[[int, str, int | None], None]) -> None:
    """The panel that forces another token at ``step``: the :data:`TOP_CANDIDATES` most probable candidates of
    ``record`` (a step's record of the stepper), or any vocabulary piece typed in, and a button calling
    ``on_force(step, example, token_id)``, where ``example`` is the piece the text box suggests and ``token_id`` the
    list's choice (``None`` when the browser's choice names no token, see :func:`~app_pages.decoding.lab.chosen_token`).
    A message the callback left in ``dl_force_msg`` (an unknown piece) is shown once."""
    ss = st.session_state
    st.markdown(f"**Force a different token at step {step}**")
    ids, probs = record.top(TOP_CANDIDATES)
    labels = {i: lab.candidate_label(pieces.of_id(tok, i), p, DECIMALS) for i, p in zip(ids, probs, strict=True)}
    # Streamlit keeps a select box's choice as its label and matches it against the next run's labels. The list
    # belongs to this step and these candidates: a key of their own makes a new box for a new list (preselecting
    # the runner-up), so a label of an earlier step is never taken for a choice in this one.
    key = f"dl_force_choice_{step}_{zlib.crc32(chr(10).join(labels.values()).encode()):08x}"
    st.selectbox(
        "Candidate (most probable first)",
        ids,
        index=1 if len(ids) > 1 else 0,
        key=key,
        format_func=lambda i: labels.get(i, str(i)),
    )
    # the example comes from this model's vocabulary and this step's candidates (a German word meant nothing to the
    # English language model)
    example = lab.example_piece(tok, ids, avoid=record.token_id)
    st.text_input(
        "…or type any vocabulary piece",
        key="dl_force_text",
        placeholder=f"e.g. {example}",
        help=f"Used instead of the list when not empty. A word start is written with {pieces.word_start(tok)}.",
    )

    def force() -> None:
        on_force(step, example, lab.chosen_token(tok, ss.get(key)))

    st.button("Force this token", icon=":material/call_split:", type="primary", on_click=force)
    message = ss.pop("dl_force_msg", None)
    if message:
        st.warning(message)
    st.caption(
        "The step is redone with your token instead of the rule's choice; the following steps continue from "
        "it. Each forced variant is kept as a branch below."
    )


def beam_view(
    ckpt: Checkpoint,
    result,
    states,
    step: int,
    width: int,
    alpha: float,
    *,
    out_col,
    steps_col,
    main,
    step_controls: Callable[[int, bool, int, str], None],
) -> None:
    """Beam search at ``step`` (0 … ``len(result.steps)``): the best hypothesis so far, the step buttons, the tree
    grown to this step, the candidates the step considered, and the open / finished hypotheses (the final
    ranking at the end). ``states`` is :func:`decoding.beam.beam_states` of ``result``."""
    tok, cfg = ckpt.tokenizer, ckpt.config
    n_total = len(result.steps)
    now = states[step]
    at_end = step == n_total
    best = result.hypotheses[0] if at_end else now.best()
    out_col.markdown("**Best hypothesis**" if at_end else f"**Best hypothesis so far** (step {step} of {n_total})")
    widgets.output_box(
        tok.decode(best.tokens) if best else "",
        where=out_col,
        empty=widgets.BEFORE_FIRST_STEP if step == 0 else "(empty output)",
    )
    with steps_col:
        step_controls(
            step,
            at_end,
            n_total,
            f"{len(now.open)} open beams · {len(now.finished)} finished · search ends after {n_total} steps",
        )
    shown = BeamResult((best,) if best and best.tokens else (), result.steps[:step])
    fig = beam_tree_figure(
        shown,
        pieces.namer(tok),
        cfg.eos_id,
        title=f"Beam search tree after step {step}",
        n_steps=n_total,
        ranks=2 * width,
    )  # the axes of the whole search: it grows in place
    widgets.show_figure(fig, where=main, key="dl_chart_beam_tree")
    main.caption("x = step, y = rank; grey = pruned, orange = best so far.")
    if step == 0:
        main.info(
            f"Press **Next**: every open beam (now only <bos>) proposes its continuations; the {2 * width} best "
            f"(beam, token) pairs by cumulative log-probability are considered and up to {width} kept."
        )
    else:
        st.markdown(
            f"**Step {step}: the {len(now.candidates)} candidates considered**, best first "
            "(cumulative log P = the beam's log P + log p(token))"
        )
        lab_table(
            [
                {
                    "rank": i + 1,
                    "beam (parent)": tok.decode(parent) or "<bos>",
                    "+ token": pieces.of_id(tok, token),
                    "cumulative log P": float(lp),
                    "outcome": ("closes a hypothesis" if token == cfg.eos_id else "kept as a beam")
                    if kept
                    else "pruned",
                }
                for i, (parent, token, lp, kept) in enumerate(now.candidates)
            ],
        )
    if at_end:
        st.markdown(
            "**Final ranking, best first** (score = log P / lp, lp = ((5 + length) / 6)^α; beams still "
            "open at the end are ranked with the finished ones)"
        )
        hypotheses_table(tok, result.hypotheses, alpha)
        return
    if now.open and step:
        st.markdown("**Open beams after this step** (score = log P / lp)")
        hypotheses_table(tok, sorted(now.open, key=lambda h: h.score, reverse=True), alpha)
    if now.finished:
        st.markdown("**Finished so far** (ended with <eos>)")
        hypotheses_table(tok, sorted(now.finished, key=lambda h: h.score, reverse=True), alpha)


def branches_view(ckpt: Checkpoint, branches: Sequence[dict], results: Sequence[tuple[list, list]]) -> None:
    """The forced-token branches side by side: a summary row each (what was forced, the translation, its log P
    under the model) and the per-step tokens of "as decoded" and the last three branches. ``branches[0]`` is
    ``{}`` (nothing forced); ``results[i]`` is ``(token ids, probabilities)`` of ``branches[i]``."""
    tok, cfg = ckpt.tokenizer, ckpt.config

    def describe(forced: dict) -> str:
        return ", ".join(f"{s}→{pieces.of_id(tok, t)}" for s, t in sorted(forced.items())) or "—"

    names = ["as decoded"] + [f"branch {i}" for i in range(1, len(branches))]
    lab_table(
        [
            {
                "branch": name,
                "forced (step→token)": describe(forced),
                "translation": tok.decode([t for t in ids if t != cfg.eos_id]),
                "log P": float(sum(math.log(max(p, 1e-12)) for p in probs)),
                "tokens": len(ids),
            }
            for name, forced, (ids, probs) in zip(names, branches, results, strict=True)
        ],
    )
    shown = [0, *range(1, len(branches))[-3:]]  # "as decoded" + the last three
    for col, i in zip(st.columns(len(shown)), shown, strict=True):
        ids, probs = results[i]
        col.markdown(f"**{names[i]}**")
        lab_table(
            [
                {
                    "step": s + 1,
                    "token": pieces.of_id(tok, t),
                    "p": float(p),
                    "forced": "★" if branches[i].get(s + 1) == t else "",
                }
                for s, (t, p) in enumerate(zip(ids, probs, strict=True))
            ],
            col,
            height=min(400, 38 + 35 * len(ids)),
        )
    st.caption(
        "Per-step probabilities under the model (T = 1); ★ = forced. Every branch is decoded to the end "
        "with the current rule and seed."
    )


def probabilities_tab(ckpt: Checkpoint, run: StepView, src_tokens: list[str]) -> None:
    """Every generated token's probability under the model and after the rule, the running sequence log P, and the
    cross-attention so far (last decoder layer, mean over heads) as an alignment grid."""
    tok = ckpt.tokenizer
    log_p, rows = 0.0, []
    for s, (rec, pipe) in enumerate(zip(run.records, run.pipelines, strict=True)):
        log_p += rec.log_prob(rec.token_id)
        rows.append(
            {
                "step": s + 1,
                "token": pieces.of_id(tok, rec.token_id),
                "p (model)": float(rec.prob),
                "p (after the rule)": pipe.final_prob(rec.token_id),
                "forced": "★" if run.forced_at(s + 1) else "",
                "cumulative log p": log_p,
            }
        )
    st.markdown(f"**Sequence log-probability so far: {log_p:.3f}** (sum of log p of each token under the model)")
    matrix = run.cross_attention_matrix()
    pcol, hcol = st.columns([1.2, 1])
    lab_table(rows, pcol)
    if matrix is not None:
        hcol.markdown(
            alignment_html(
                matrix[-1].mean(0),
                pieces.of_ids(tok, run.generated),
                src_tokens,
                title="Cross-attention so far (last decoder layer, mean over heads)",
            ),
            unsafe_allow_html=True,
        )


def forced_caption(tok, forced: dict[int, int]) -> str:
    """``"step 3 → ▁Haus, …"``: the forced tokens in step order, HTML-escaped."""
    return ", ".join(f"step {s} → {html.escape(pieces.of_id(tok, t))}" for s, t in sorted(forced.items()))
