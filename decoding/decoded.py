"""A finished decoding as an immutable value: what many visitors read at once.

A server shows one decoding to every visitor who typed the same sentence, and a click's script run may overlap
the previous run of the same visitor. So a decoding is run to its end once and frozen: a :class:`Decoding` holds
tuples of frozen :class:`~decoding.stepping.StepRecord` s and has no method that changes it. Stepping through it is
an index (``decoding.decoded.StepView.of(decoding, step)``), never a change of it, so two sessions at different
steps of one cached decoding cannot disturb each other.

Its tensors are inference tensors (made under ``torch.inference_mode``): torch refuses to change one in place
outside inference mode (``RuntimeError: Inplace update to inference tensor outside InferenceMode``), and the
pages never run in it, so a page that tried to write into a shared distribution would fail loudly instead of
changing what every other visitor sees.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Mapping

import torch

from decoding.sampling import Pipeline
from decoding.stepping import Stepper, StepRecord, greedy_choice, strip_eos


@dataclass(frozen=True, eq=False)  # tensors inside: compared and hashed by identity
class Decoding:
    """One decoding run to its end (``<eos>`` or the length limit), frozen.

    Attributes:
        prefix: the decoder's start (``<bos>``, plus a decoder-only model's prompt).
        generated: every generated token, a final ``<eos>`` included (``[n_steps]``).
        records: one :class:`StepRecord` per generated token, slimmed (:meth:`StepRecord.slim`: its top tokens,
            not the ``[vocab]`` row) unless frozen with ``full=True``; its attention rows.
        max_new_tokens: the length limit the decoding ran under.
        eos_id: the model's ``<eos>`` id.
        cross_bytes: bytes of the cross-attention K/V, held from the first step on (0 for a decoder-only model).
        pipelines: a sampled decoding's per-step :class:`~decoding.sampling.Pipeline` (temperature, top-k, top-p,
            the pick), slimmed the same way (:class:`~decoding.sampling.SlimPipeline`); ``token_id`` is the token
            actually taken. Empty for plain greedy decoding.
        suggested: what the rule itself picked at each step (differs from the token where one was forced).
        forced: ``((step, token_id), …)``, 1-based steps, sorted: the tokens a user forced.
    """

    prefix: tuple[int, ...]
    generated: tuple[int, ...]
    records: tuple[StepRecord, ...]
    max_new_tokens: int
    eos_id: int
    cross_bytes: int
    pipelines: tuple[Pipeline, ...] = ()
    suggested: tuple[int, ...] = ()
    forced: tuple[tuple[int, int], ...] = ()

    @classmethod
    def of(
        cls, stepper: Stepper, pipelines=(), suggested=(), forced: Mapping[int, int] | None = None, full: bool = False
    ) -> "Decoding":
        """Freeze what ``stepper`` has decoded so far (call it once the stepper is finished). A shared decoding
        keeps what the pages show of each step: its records and pipelines are slimmed (no ``[vocab]`` rows)
        unless ``full``."""
        records = tuple(stepper.records) if full else tuple(r.slim() for r in stepper.records)
        if not full and pipelines:  # a greedy decoding has none; a sampled one has one a step
            pipelines = [p.slim(r.banned) for p, r in zip(pipelines, stepper.records, strict=True)]
        return cls(
            tuple(stepper.prefix),
            tuple(stepper.generated),
            records,
            stepper.max_new_tokens,
            stepper.model.cfg.eos_id,
            stepper.cache.nbytes()["cross"],
            tuple(pipelines),
            tuple(suggested),
            tuple(sorted((int(k), int(v)) for k, v in (forced or {}).items())),
        )

    @property
    def n_steps(self) -> int:
        """Tokens generated, a final ``<eos>`` included."""
        return len(self.records)

    @property
    def tokens(self) -> tuple[int, ...]:
        """The prefix and every generated token."""
        return self.prefix + self.generated

    @property
    def finished(self) -> bool:
        """Ends with ``<eos>`` or at the length limit (true of every decoding built by :func:`decode`)."""
        return bool(self.generated and self.generated[-1] == self.eos_id) or self.n_steps >= self.max_new_tokens

    @property
    def forced_map(self) -> dict[int, int]:
        """``{step: token_id}`` of the forced tokens (a fresh dict: changing it changes nothing here)."""
        return dict(self.forced)

    def output_ids(self) -> list[int]:
        """Generated ids without a final ``<eos>``."""
        return strip_eos(list(self.generated), self.eos_id)

    def tokens_and_probs(self) -> tuple[list[int], list[float]]:
        """Generated ids and the model probability (softmax at T = 1) of each."""
        return [r.token_id for r in self.records], [r.prob for r in self.records]


def decode(stepper: Stepper, choose: Callable[[torch.Tensor], int] = greedy_choice) -> Decoding:
    """Step a fresh ``stepper`` to its end with ``choose(log_probs [vocab]) -> token id`` (greedy by default) and
    freeze the result."""
    stepper.run_to_end(choose)
    return Decoding.of(stepper)


@dataclass(frozen=True)
class StepView:
    """A finished decoding as it stood after its first ``step`` tokens: what the step-through pages draw.

    The decoding is shared by every session (a frozen :class:`Decoding`); a session keeps only its step number and
    takes the view of that step with :meth:`of`. Nothing is copied but tuples of references.

    Attributes:
        step: tokens generated so far (0 … the decoding's length).
        prefix: the decoder's start (``<bos>``, plus a decoder-only model's prompt).
        generated: the tokens generated so far (``[step]``).
        records: one :class:`StepRecord` per generated token.
        finished: the decoding ends with this step (``<eos>`` or the length limit).
        cross_bytes: bytes of the cross-attention K/V held once a step has run (0 for a decoder-only model).
        eos_id: the model's ``<eos>`` id.
        pipelines, suggested: a sampled decoding's per-step pipelines and the rule's own picks so far.
        forced: the decoding's forced tokens ``((step, token_id), …)``, later steps included.
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
    forced: tuple[tuple[int, int], ...] = ()

    @classmethod
    def of(cls, decoding: Decoding, step: int) -> "StepView":
        """The view of ``decoding`` after ``step`` tokens, clamped to ``[0, its length]``."""
        step = min(max(int(step), 0), decoding.n_steps)
        records = decoding.records[:step]
        finished = bool(records and records[-1].token_id == decoding.eos_id) or step >= decoding.max_new_tokens
        return cls(
            step,
            decoding.prefix,
            decoding.generated[:step],
            records,
            finished,
            decoding.cross_bytes if step else 0,
            decoding.eos_id,
            decoding.pipelines[:step],
            decoding.suggested[:step],
            decoding.forced,
        )

    @property
    def tokens(self) -> tuple[int, ...]:
        """The prefix and the tokens generated so far."""
        return self.prefix + self.generated

    def output_ids(self) -> list[int]:
        """Generated ids without a final ``<eos>``."""
        return strip_eos(list(self.generated), self.eos_id)

    def forced_at(self, step: int) -> bool:
        """Whether the token of 1-based ``step`` (already taken) was forced."""
        return 1 <= step <= self.step and step in dict(self.forced)

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
        return torch.stack([r.cross_attention for r in self.records if r.cross_attention is not None], dim=2)
