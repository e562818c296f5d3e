"""The decoding lab's state, without Streamlit: a replayable sampled/forced decode, URL parsing, cache timing.

:class:`LabRun` wraps a :class:`~model.decoding.Stepper` and a seeded :class:`~model.sampling.Chooser`. Before
each step it saves the generator state, so Back restores it and the next Next draws the very same sample: a
run is a pure function of (model, sentence, sampling settings, seed, forced tokens), and the same seed gives
the same tokens as ``python -m model.translate --strategy sample --seed S`` when nothing is forced.

Forced tokens are ``{step: token_id}`` with 1-based steps (step 3 = the third generated token). At a forced
step the rule still draws its sample (so the random stream of later steps is unchanged) and the forced token
replaces it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from typing import Mapping

import torch

from model.decoding import StepRecord, Stepper, strip_eos
from model.sampling import Chooser, Pipeline, SamplingConfig, SamplingError
from model.transformer import Transformer
from ui import url

STRATEGIES = ("greedy", "sample", "beam")
#: Widget ranges; URL values outside them are clamped (with a message).
TEMPERATURE_RANGE = (0.05, 2.0)
TOP_P_RANGE = (0.05, 1.0)
SEED_RANGE = (0, 2**31 - 1)
BEAM_RANGE = (1, 8)
ALPHA_RANGE = (0.0, 2.0)
DEFAULTS = dict(strategy="greedy", temperature=1.0, top_k=0, top_p=1.0, seed=0, beam=4, alpha=0.6)


class LabRun:
    """One decode of one sentence under one sampling rule, stepped forward and back, with forced tokens.

    Args:
        model: an eval-mode Transformer.
        src_ids: encoder ids (``<eos>`` included).
        sampling: a validated :class:`SamplingConfig` (``strategy`` greedy or sample).
        forced: ``{step: token_id}`` (1-based steps).
        max_new_tokens: length limit of the decode.
    """

    def __init__(self, model: Transformer, src_ids: list[int], sampling: SamplingConfig,
                 forced: Mapping[int, int] | None = None, max_new_tokens: int | None = None):
        self.sampling = sampling
        self.stepper = Stepper(model, src_ids, max_new_tokens=max_new_tokens)
        self.forced: dict[int, int] = dict(forced or {})
        self.reset()

    # --- state ------------------------------------------------------------------------------------------
    def reset(self) -> None:
        self.stepper.reset()
        self.chooser = Chooser(self.sampling)
        self.pipelines: list[Pipeline] = []  # per step, token_id = the token actually taken
        self.suggested: list[int] = []  # per step, what the rule picked (differs from the token where forced)
        self._gen_states: list[torch.Tensor] = []

    @property
    def records(self) -> list[StepRecord]:
        return self.stepper.records

    @property
    def n_steps(self) -> int:
        return len(self.stepper.records)

    @property
    def finished(self) -> bool:
        return self.stepper.finished

    def forced_at(self, step: int) -> bool:
        """Whether the token of 1-based ``step`` (already taken) was forced."""
        return 1 <= step <= self.n_steps and step in self.forced

    # --- stepping ---------------------------------------------------------------------------------------
    def step(self) -> StepRecord | None:
        """One token: the rule's choice, or the forced token at a forced step. ``None`` once finished."""
        if self.stepper.finished:
            return None
        step = self.n_steps + 1
        state = self.chooser.generator.get_state()
        forced = self.forced.get(step)

        def choose(log_probs: torch.Tensor) -> int:
            picked = self.chooser(log_probs)  # drawn even when forced: later steps see the same random stream
            return picked if forced is None else int(forced)

        rec = self.stepper.step(choose)
        pipe = self.chooser.last
        self._gen_states.append(state)
        self.suggested.append(pipe.token_id)
        self.pipelines.append(pipe if forced is None else replace(pipe, token_id=int(forced)))
        return rec

    def back(self) -> None:
        """Undo the last step and rewind the random generator to before it."""
        if not self.stepper.records:
            return
        self.stepper.back()
        self.pipelines.pop()
        self.suggested.pop()
        self.chooser.generator.set_state(self._gen_states.pop())

    def goto(self, n_steps: int) -> None:
        """Move to ``n_steps`` generated tokens (or as far as the decoding goes)."""
        while self.n_steps > n_steps:
            self.back()
        while self.n_steps < n_steps and not self.stepper.finished:
            self.step()

    def run_to_end(self) -> None:
        while self.step() is not None:
            pass

    def set_forced(self, forced: Mapping[int, int]) -> None:
        """Replace the forced tokens; steps from the first changed one on are undone (the caller goes back
        to the step it shows with :meth:`goto`)."""
        forced = {int(k): int(v) for k, v in forced.items()}
        changed = [s for s in set(forced) | set(self.forced) if forced.get(s) != self.forced.get(s)]
        self.forced = forced
        if changed:
            first = min(changed)
            while self.n_steps >= first:
                self.back()

    def tokens_and_probs(self) -> tuple[list[int], list[float]]:
        """Generated ids and the model probability (softmax at T = 1) of each."""
        return [r.token_id for r in self.records], [r.prob for r in self.records]


@dataclass(frozen=True)
class StepView:
    """A finished decoding as it stood after its first ``step`` tokens: what the step-through pages draw.

    Pages never step a decoding kept in the session: a click's script run may overlap the previous one (Streamlit
    starts it at once), and two runs stepping one shared object leave it half-updated. Instead, the decoding is
    run to its end once and cached (read-only), and each run takes the view of the step it shows with :meth:`of`.
    Nothing is copied but the lists of references; the records and tensors are shared and must not be changed.

    Attributes:
        step: tokens generated so far (0 … the decoding's length).
        prefix: the decoder's start (``<bos>``, plus a decoder-only model's prompt).
        generated: the tokens generated so far (``[step]``).
        records: one :class:`StepRecord` per generated token.
        finished: the decoding ends with this step (``<eos>`` or the length limit).
        cross_bytes: bytes of the cross-attention K/V held once a step has run (0 for a decoder-only model).
        eos_id: the model's ``<eos>`` id.
        pipelines, suggested, forced: a :class:`LabRun`'s per-step pipelines and the rule's own picks so far, and
            its forced tokens ``{step: token_id}``, later steps included (empty for a plain :class:`Stepper`).
    """

    step: int
    prefix: tuple[int, ...]
    generated: tuple[int, ...]
    records: tuple[StepRecord, ...]
    finished: bool
    cross_bytes: int
    eos_id: int
    pipelines: tuple[Pipeline, ...] = ()
    suggested: tuple[int, ...] = ()
    forced: Mapping[int, int] = field(default_factory=dict)

    @classmethod
    def of(cls, run: "LabRun | Stepper", step: int) -> "StepView":
        """The view of a run (a finished :class:`Stepper` or :class:`LabRun`) after ``step`` tokens, clamped to
        ``[0, its length]``."""
        stepper = run.stepper if isinstance(run, LabRun) else run
        step = min(max(int(step), 0), len(stepper.records))
        records = tuple(stepper.records[:step])
        eos = stepper.model.cfg.eos_id
        finished = bool(records and records[-1].token_id == eos) or step >= stepper.max_new_tokens
        extra = {}
        if isinstance(run, LabRun):
            extra = dict(pipelines=tuple(run.pipelines[:step]), suggested=tuple(run.suggested[:step]),
                         forced=dict(run.forced))
        return cls(step, tuple(stepper.prefix), tuple(stepper.generated[:step]), records, finished,
                   stepper.cache.nbytes()["cross"] if step else 0, eos, **extra)

    @property
    def tokens(self) -> tuple[int, ...]:
        """The prefix and the tokens generated so far."""
        return self.prefix + self.generated

    def output_ids(self) -> list[int]:
        """Generated ids without a final ``<eos>``."""
        return strip_eos(list(self.generated), self.eos_id)

    def forced_at(self, step: int) -> bool:
        """Whether the token of 1-based ``step`` (already taken) was forced."""
        return 1 <= step <= self.step and step in self.forced

    @property
    def cache_positions(self) -> int:
        """Positions in the self-attention KV cache: every token fed so far (the newest one is not fed yet)."""
        return len(self.prefix) + self.step - 1 if self.step else 0

    def cache_nbytes(self) -> dict[str, int]:
        """``{"self", "cross", "total"}`` bytes the KV cache held after this step, as the cache itself counted
        them (:attr:`StepRecord.cache_bytes`)."""
        total = self.records[-1].cache_bytes if self.records else 0
        return {"self": total - self.cross_bytes, "cross": self.cross_bytes, "total": total}

    def cross_attention_matrix(self) -> torch.Tensor | None:
        """Cross-attention of the generated tokens ``[layers, heads, step, src_len]`` (``None`` without any)."""
        if not self.records or self.records[0].cross_attention is None:
            return None
        return torch.stack([r.cross_attention for r in self.records], dim=2)


def forced_after(forced: Mapping[int, int], step: int, token_id: int) -> dict[int, int]:
    """The forced tokens after forcing ``token_id`` at ``step``: later forced steps are dropped (they belonged
    to the branch being replaced), earlier ones kept."""
    out = {int(k): int(v) for k, v in forced.items() if int(k) < step}
    out[int(step)] = int(token_id)
    return out


# --- URL parameters -----------------------------------------------------------------------------------------
def settings_from_link(params: Mapping[str, str], vocab_size: int) -> tuple[dict, list[str]]:
    """The lab's settings from the link's query parameters (read by :mod:`ui.url`): every key of :data:`DEFAULTS`,
    each within its widget's range, and the notes about values that were clamped or ignored."""
    parsed = {
        "strategy": url.choice_param(params, "strategy", STRATEGIES, DEFAULTS["strategy"], what="decoding rule"),
        "temperature": url.float_param(params, "temperature", DEFAULTS["temperature"], *TEMPERATURE_RANGE),
        "top_k": url.int_param(params, "top_k", DEFAULTS["top_k"], 0, vocab_size),
        "top_p": url.float_param(params, "top_p", DEFAULTS["top_p"], *TOP_P_RANGE),
        "seed": url.int_param(params, "seed", DEFAULTS["seed"], *SEED_RANGE),
        "beam": url.int_param(params, "beam", DEFAULTS["beam"], *BEAM_RANGE, what="beam width"),
        "alpha": url.float_param(params, "alpha", DEFAULTS["alpha"], *ALPHA_RANGE, what="length penalty"),
    }
    return {k: v for k, (v, _) in parsed.items()}, [n for _, n in parsed.values() if n]


def sampling_config(settings: Mapping) -> SamplingConfig:
    """The :class:`SamplingConfig` of the lab's settings (greedy ignores temperature, top-k, top-p and seed).

    Raises:
        SamplingError: a value out of range.
    """
    if settings["strategy"] == "sample":
        return SamplingConfig("sample", float(settings["temperature"]), int(settings["top_k"]),
                              float(settings["top_p"]), int(settings["seed"])).validate()
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

    def run(use_cache: bool):
        stepper = Stepper(model, src_ids, max_new_tokens=n, use_cache=use_cache)
        start = time.perf_counter()
        for t in tokens:
            stepper.step(lambda lp, t=t: t)
        return (time.perf_counter() - start) * 1000 / n, torch.stack([r.log_probs for r in stepper.records])

    best = {}
    for use_cache in (True, False) * max(1, repeats):
        ms, lp = run(use_cache)
        best[use_cache] = (min(ms, best[use_cache][0]) if use_cache in best else ms, lp)
    diff = float((best[True][1] - best[False][1]).abs().max())
    return CacheComparison(n, diff, best[True][0], best[False][0])


def resolve_piece(tokenizer, text: str) -> int | None:
    """The id of a vocabulary piece typed by a user as the pages show pieces: the piece as typed, else as a word
    start (the tokenizer's mark, ``▁`` or GPT-2's ``␣``, + text; a leading ``_`` is read as the mark). GPT-2's
    ``␣the`` is looked up as its stored ``Ġthe``. ``None`` when none is in the vocabulary."""
    text = (text or "").strip()
    if not text:
        return None
    mark = getattr(tokenizer, "word_start", "▁")
    stored = getattr(tokenizer, "from_display", None) or str
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


def example_piece(tokenizer, candidate_ids, avoid: int | None = None) -> str:
    """A piece to show as an example of what can be typed in the force box, as the pages show it: a word start
    (the tokenizer's mark and two letters or more) among ``candidate_ids`` (this step's most probable next tokens,
    most probable first) other than ``avoid`` (the token taken), else any of them, else the vocabulary's first word
    start. Taken from the model's own vocabulary and context, so that a language model of English does not suggest
    a German word."""
    mark = getattr(tokenizer, "word_start", "▁")
    display = getattr(tokenizer, "display", None) or str
    shown = [(int(i), display(tokenizer.id_to_token(int(i)))) for i in candidate_ids]
    shown = [(i, p) for i, p in shown if p]

    def word_start(piece: str) -> bool:
        return piece.startswith(mark) and len(piece) > 2 and piece[1:].isalpha()

    for test in (lambda i, p: i != avoid and word_start(p), lambda i, p: word_start(p), lambda i, p: i != avoid):
        found = next((p for i, p in shown if test(i, p)), None)
        if found:
            return found
    every = (display(tokenizer.id_to_token(i)) for i in range(int(getattr(tokenizer, "vocab_size", 0))))
    return next((p for p in every if word_start(p)), mark)
