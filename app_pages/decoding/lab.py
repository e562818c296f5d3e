"""The decoding lab's state, without Streamlit: a sampled/forced decode frozen for sharing, URL parsing, cache timing.

:func:`lab_decoding` runs one sentence under one rule (greedy, or seeded sampling) with forced tokens to its end
and freezes it as a :class:`~decoding.decoded.Decoding`: a pure function of (model, sentence, sampling settings,
seed, forced tokens), cached and read by every session; the same seed gives the same tokens as
``python -m decoding.translate --strategy sample --seed S`` when nothing is forced. A page shows it one step at a
time through :class:`StepView`, an index into it.

Forced tokens are ``{step: token_id}`` with 1-based steps (step 3 = the third generated token). At a forced
step the rule still draws its sample (so the random stream of later steps is unchanged) and the forced token
replaces it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import Mapping

import torch

from decoding.decoded import Decoding
from decoding.sampling import Chooser, Pipeline, SamplingConfig
from decoding.stepping import Stepper
from model.hf.generation import GenerationDefaults
from model.tokenizing import Tokenizer
from model.transformer import Transformer
from ui import url

STRATEGIES = ("greedy", "sample", "beam")
#: Widget ranges; URL values outside them are clamped (with a message).
TEMPERATURE_RANGE = (0.05, 2.0)
TOP_P_RANGE = (0.05, 1.0)
SEED_RANGE = (0, 2**31 - 1)
BEAM_RANGE = (1, 8)
ALPHA_RANGE = (0.0, 2.0)
#: The lab's settings before a link or a visitor changes them; a Hugging Face model's own beam width and length
#: penalty (its generation_config.json) replace ``beam`` and ``alpha`` (:func:`settings_from_link`).
DEFAULTS = dict(strategy="greedy", temperature=1.0, top_k=0, top_p=1.0, seed=0, beam=4, alpha=0.6, guard=False)


def lab_decoding(
    model: Transformer,
    src_ids: list[int],
    sampling: SamplingConfig,
    forced: Mapping[int, int] | None = None,
    max_new_tokens: int | None = None,
    forced_eos_id: int | None = None,
    loop_times: int = 0,
) -> Decoding:
    """One sentence decoded to its end under one rule, with forced tokens, frozen.

    Args:
        model: an eval-mode Transformer.
        src_ids: encoder ids (``<eos>`` included), or a decoder-only model's prompt.
        sampling: a validated :class:`SamplingConfig` (``strategy`` greedy or sample).
        forced: ``{step: token_id}`` (1-based steps).
        max_new_tokens: length limit of the decode.
        forced_eos_id: the token a decoding that reaches the limit ends with (a Hugging Face generation config's).
        loop_times: 0, or the loop guard's count (:class:`~decoding.stepping.Stepper`); a forced token is never banned.

    Returns:
        A :class:`Decoding` with ``pipelines`` (what the rule did at each step), ``suggested`` (the rule's own
        pick) and ``forced``.
    """
    forced = {int(k): int(v) for k, v in (forced or {}).items()}
    stepper = Stepper(model, src_ids, max_new_tokens=max_new_tokens, forced_eos_id=forced_eos_id, loop_times=loop_times)
    chooser = Chooser(sampling)
    pipelines: list[Pipeline] = []
    suggested: list[int] = []
    while not stepper.finished:
        at = forced.get(len(stepper.records) + 1)

        def choose(log_probs: torch.Tensor, at=at) -> int:
            picked = chooser(log_probs)  # drawn even when forced: later steps see the same random stream
            return picked if at is None else at

        stepper.step(choose)
        last = chooser.last
        assert last is not None, "the step has just called the chooser"
        suggested.append(last.token_id)
        pipelines.append(last if at is None else replace(last, token_id=at))
    return Decoding.of(stepper, pipelines, suggested, forced)


def forced_after(forced: Mapping[int, int], step: int, token_id: int) -> dict[int, int]:
    """The forced tokens after forcing ``token_id`` at ``step``: later forced steps are dropped (they belonged
    to the branch being replaced), earlier ones kept."""
    out = {int(k): int(v) for k, v in forced.items() if int(k) < step}
    out[int(step)] = int(token_id)
    return out


# --- URL parameters -----------------------------------------------------------------------------------------
def lab_defaults(generation: GenerationDefaults | None = None) -> dict:
    """The lab's settings for a model: :data:`DEFAULTS`, where a Hugging Face model's ``generation`` states a beam
    width or length penalty those (brought into the widgets' ranges). A link leaves these out."""
    own = generation.beam_defaults() if generation else {}
    return dict(
        DEFAULTS,
        beam=min(max(own.get("beam", DEFAULTS["beam"]), BEAM_RANGE[0]), BEAM_RANGE[1]),
        alpha=min(max(own.get("alpha", DEFAULTS["alpha"]), ALPHA_RANGE[0]), ALPHA_RANGE[1]),
    )


def settings_from_link(
    params: Mapping[str, str], vocab_size: int, generation: GenerationDefaults | None = None
) -> tuple[dict, list[str]]:
    """The lab's settings from the link's query parameters (read by :mod:`ui.url`): every key of :data:`DEFAULTS`,
    each within its widget's range, and the notes about values that were clamped or ignored. A parameter the link
    leaves out takes its default (:func:`lab_defaults`)."""
    defaults = lab_defaults(generation)
    parsed = {
        "strategy": url.choice_param(params, "strategy", STRATEGIES, defaults["strategy"], what="decoding rule"),
        "temperature": url.float_param(params, "temperature", defaults["temperature"], *TEMPERATURE_RANGE),
        "top_k": url.int_param(params, "top_k", defaults["top_k"], 0, vocab_size),
        "top_p": url.float_param(params, "top_p", defaults["top_p"], *TOP_P_RANGE),
        "seed": url.int_param(params, "seed", defaults["seed"], *SEED_RANGE),
        "beam": url.int_param(params, "beam", defaults["beam"], *BEAM_RANGE, what="beam width"),
        "alpha": url.float_param(params, "alpha", defaults["alpha"], *ALPHA_RANGE, what="length penalty"),
        "guard": url.bool_param(params, "guard", defaults["guard"], what="loop guard"),
    }
    return {k: v for k, (v, _) in parsed.items()}, [n for _, n in parsed.values() if n]


def sampling_config(settings: Mapping) -> SamplingConfig:
    """The :class:`SamplingConfig` of the lab's settings (greedy ignores temperature, top-k, top-p and seed).

    Raises:
        SamplingError: a value out of range.
    """
    if settings["strategy"] == "sample":
        return SamplingConfig(
            "sample",
            float(settings["temperature"]),
            int(settings["top_k"]),
            float(settings["top_p"]),
            int(settings["seed"]),
        ).validate()
    return SamplingConfig("greedy").validate()


# --- KV cache on / off ----------------------------------------------------------------------------------------
@dataclass
class CacheComparison:
    steps: int
    max_abs_diff: float  # max |log p(cache on) − log p(cache off)| over all steps and the whole vocabulary
    ms_per_step_on: float
    ms_per_step_off: float


def compare_cache(model: Transformer, src_ids: list[int], tokens: list[int], repeats: int = 3) -> CacheComparison:
    """Decode ``tokens`` (teacher-forced) with and without the KV cache; compare the log-probs and time them.

    Timings are the best of ``repeats`` runs (``time.perf_counter``), in milliseconds per step, measured now
    on this machine.
    """
    n = len(tokens)
    if n == 0:
        raise ValueError("at least one step is needed")

    def run(use_cache: bool) -> tuple[float, torch.Tensor]:
        stepper = Stepper(model, src_ids, max_new_tokens=n, use_cache=use_cache)
        start = time.perf_counter()
        for t in tokens:

            def choose(log_probs: torch.Tensor, t: int = t) -> int:
                return t

            stepper.step(choose)
        ms = (time.perf_counter() - start) * 1000 / n
        return ms, torch.stack([r.log_probs for r in stepper.records if r.log_probs is not None])

    best: dict[bool, tuple[float, torch.Tensor]] = {}
    for use_cache in (True, False) * max(1, repeats):
        ms, lp = run(use_cache)
        best[use_cache] = (min(ms, best[use_cache][0]) if use_cache in best else ms, lp)
    diff = float((best[True][1] - best[False][1]).abs().max())
    return CacheComparison(n, diff, best[True][0], best[False][0])


def resolve_piece(tokenizer: Tokenizer, text: str) -> int | None:
    """The id of a vocabulary piece typed by a user as the pages show pieces: the piece as typed, else as a word
    start (the tokenizer's mark, ``▁`` or GPT-2's ``␣``, + text; a leading ``_`` is read as the mark). GPT-2's
    ``␣the`` is looked up as its stored ``Ġthe``. ``None`` when none is in the vocabulary."""
    text = (text or "").strip()
    if not text:
        return None
    mark, stored = tokenizer.word_start, tokenizer.from_display
    candidates = [text]
    if text.startswith("_"):
        candidates.append(mark + text[1:])
    if not text.startswith(mark):
        candidates.append(mark + text)
    for piece in candidates:
        for form in dict.fromkeys((stored(piece), piece)):  # the stored form first; the typed one as it is
            tid = tokenizer.token_to_id(form)
            if tid is not None:
                return int(tid)
    return None


#: Between a candidate's piece and its probability in the force list's labels (``"▁lern  (p = 0.039)"``).
LABEL_SEP = "  (p = "
#: Characters of a typed piece a message repeats: a pasted page must not become a warning a screen long.
ECHO_CHARS = 40


def candidate_label(piece: str, prob: float, decimals: int) -> str:
    """A force-list label: the shown ``piece``, then its probability ``prob`` (0…1) with ``decimals`` decimals."""
    return f"{piece}{LABEL_SEP}{prob:.{decimals}f})"


def chosen_token(tokenizer: Tokenizer, value: object) -> int | None:
    """The token id the force list's ``value`` stands for, or ``None`` when it names none.

    ``value`` is an id when Streamlit found the browser's label among the options; otherwise Streamlit hands back
    the label itself (a label of an earlier step, say ``"▁lern  (p = 0.039)"``), which is read by its piece (the
    token the visitor saw selected). Never raises: a value that names no token of the vocabulary gives ``None``.
    """
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if 0 <= value < tokenizer.vocab_size else None
    if not isinstance(value, str):
        return None
    return resolve_piece(tokenizer, value.split(LABEL_SEP, 1)[0])


def echo(text: str, limit: int = ECHO_CHARS) -> str:
    """``text`` as a message repeats it: its first ``limit`` characters, and "…" when it was longer."""
    return text if len(text) <= limit else text[:limit] + "…"


def example_piece(tokenizer: Tokenizer, candidate_ids, avoid: int | None = None) -> str:
    """A piece to show as an example of what can be typed in the force box, as the pages show it: a word start
    (the tokenizer's mark and two letters or more) among ``candidate_ids`` (this step's most probable next tokens,
    most probable first) other than ``avoid`` (the token taken), else any of them, else the vocabulary's first word
    start. Taken from the model's own vocabulary and context, so that a language model of English does not suggest
    a German word."""
    mark, display = tokenizer.word_start, tokenizer.display
    shown = [(int(i), display(tokenizer.id_to_token(int(i)))) for i in candidate_ids]
    shown = [(i, p) for i, p in shown if p]

    def word_start(piece: str) -> bool:
        return piece.startswith(mark) and len(piece) > 2 and piece[1:].isalpha()

    for test in (lambda i, p: i != avoid and word_start(p), lambda i, p: word_start(p), lambda i, p: i != avoid):
        found = next((p for i, p in shown if test(i, p)), None)
        if found:
            return found
    every = (display(tokenizer.id_to_token(i)) for i in range(tokenizer.vocab_size))
    return next((p for p in every if word_start(p)), mark)
