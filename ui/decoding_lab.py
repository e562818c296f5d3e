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

import math
import time
from dataclasses import dataclass, replace
from typing import Mapping

import torch

from model.decoding import StepRecord, Stepper
from model.sampling import Chooser, Pipeline, SamplingConfig, SamplingError
from model.transformer import Transformer

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


def forced_after(forced: Mapping[int, int], step: int, token_id: int) -> dict[int, int]:
    """The forced tokens after forcing ``token_id`` at ``step``: later forced steps are dropped (they belonged
    to the branch being replaced), earlier ones kept."""
    out = {int(k): int(v) for k, v in forced.items() if int(k) < step}
    out[int(step)] = int(token_id)
    return out


# --- URL parameters -----------------------------------------------------------------------------------------
def format_forced(forced: Mapping[int, int]) -> str:
    """``{3: 1234, 5: 88}`` → ``"3:1234,5:88"``."""
    return ",".join(f"{s}:{t}" for s, t in sorted(forced.items()))


def parse_forced(text: str | None, vocab_size: int, max_steps: int) -> tuple[dict[int, int], list[str]]:
    """``"3:1234,5:88"`` → ``{3: 1234, 5: 88}``; malformed or out-of-range entries are dropped with a note."""
    forced: dict[int, int] = {}
    bad: list[str] = []
    for part in (text or "").split(","):
        part = part.strip()
        if not part:
            continue
        try:
            s, t = (int(x) for x in part.split(":"))
        except ValueError:
            bad.append(part)
            continue
        if 1 <= s <= max_steps and 0 <= t < vocab_size:
            forced[s] = t
        else:
            bad.append(part)
    notes = []
    if bad:
        shown = ", ".join(b[:20] for b in bad[:5])
        notes.append(f"Ignored forced-token entries from the link that are not `step:token_id` within range: {shown}.")
    return forced, notes


def _number(raw, kind):
    value = kind(float(raw)) if kind is int else float(raw)
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError("not finite")
    return value


def parse_params(params: Mapping[str, str], vocab_size: int) -> tuple[dict, list[str]]:
    """Read the lab's settings from URL query parameters, clamping or ignoring bad values.

    Returns ``(settings, notes)``: ``settings`` has every key of :data:`DEFAULTS` plus ``step`` (int ≥ 0),
    always valid for the widgets; ``notes`` says, in plain words, what was changed and why. Range errors on
    temperature / top-p / top-k are phrased by :meth:`SamplingConfig.validate`.
    """
    out = dict(DEFAULTS, step=0)
    notes: list[str] = []

    def read(key, kind):
        if key not in params:
            return None
        try:
            return _number(params[key], kind)
        except (TypeError, ValueError, OverflowError):
            notes.append(f"Ignored `{key}={str(params[key])[:30]}` from the link (not a number).")
            return None

    strategy = params.get("strategy")
    if strategy is not None:
        if strategy in STRATEGIES:
            out["strategy"] = strategy
        else:
            notes.append(f"Unknown strategy `{str(strategy)[:30]}` in the link; using greedy.")

    def clamp(key, value, lo, hi, check=None):
        if value is None:
            return
        clamped = min(max(value, lo), hi)
        if check is not None:
            try:
                check(value)
            except SamplingError as exc:
                notes.append(f"{exc}; using {clamped:g} instead.")
                out[key] = clamped
                return
        if clamped != value:
            notes.append(f"`{key}={value:g}` is outside {lo:g}–{hi:g}; using {clamped:g}.")
        out[key] = clamped

    clamp("temperature", read("temperature", float), *TEMPERATURE_RANGE,
          check=lambda v: SamplingConfig("sample", temperature=v).validate())
    clamp("top_p", read("top_p", float), *TOP_P_RANGE, check=lambda v: SamplingConfig("sample", top_p=v).validate())
    top_k = read("top_k", int)
    if top_k is not None:
        try:
            cfg = SamplingConfig("sample", top_k=top_k).validate(vocab_size)
            if cfg.top_k != top_k:
                notes.append(f"top-k {top_k} is larger than the vocabulary; using {cfg.top_k} (= no cut).")
            out["top_k"] = cfg.top_k
        except SamplingError as exc:
            notes.append(f"{exc}; using 0 (no top-k cut) instead.")
    clamp("seed", read("seed", int), *SEED_RANGE)
    clamp("beam", read("beam", int), *BEAM_RANGE)
    clamp("alpha", read("alpha", float), *ALPHA_RANGE)
    step = read("step", int)
    if step is not None:
        if step < 0:
            notes.append(f"`step={step}` is negative; starting at step 0.")
        out["step"] = max(0, step)
    return out, notes


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
    """The id of a vocabulary piece typed by a user: the piece as typed, else as a word start (``▁`` + text;
    a leading ``_`` is read as ``▁``). ``None`` when neither is in the vocabulary."""
    text = (text or "").strip()
    if not text:
        return None
    candidates = [text]
    if text.startswith("_"):
        candidates.append("▁" + text[1:])
    if not text.startswith("▁"):
        candidates.append("▁" + text)
    for piece in candidates:
        tid = tokenizer.token_to_id(piece)
        if tid is not None:
            return int(tid)
    return None
