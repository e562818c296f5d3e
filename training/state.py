"""The trainer's resumable state and the files of ``last/`` that hold it: THE owner of both.

:class:`TrainerState` is where a run stands: its position in the data, what it has consumed, and the best
evaluation so far. Only the :class:`trainer.loop.Trainer` changes it, through its methods (:meth:`advance`,
:meth:`next_epoch`, :meth:`record_evaluation`, :meth:`set_train_seconds`); every other module reads its values.

``last/`` is a checkpoint (weights, config, tokenizer, a card) plus the resume state, written by
:func:`save_resume_state` and read back by :func:`load_resume_state`:

* ``trainer_state.json``: the :class:`TrainerState` as a JSON object (:meth:`TrainerState.to_dict`);
* ``optimizer.safetensors``: the optimizer's moments as ``opt.<group>.<param>.<key>`` and the CPU RNG state of every
  data-parallel rank, rank 0's as ``rng.torch`` and rank r's as ``rng.torch.r``.

A ``trainer_state.json`` written by an older trainer lacks the fields added since (``best_score``,
``evals_since_best``, ``last_eval_step``, ``world_size``): they read back as their defaults, and a run saved before
``--select`` existed is selected by its ``best_valid_loss`` (:meth:`TrainerState.record_evaluation`).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

import torch
from safetensors.torch import load_file

from model.checkpoint import atomic_write_json, save_checkpoint, save_tensors

STATE_FILE = "trainer_state.json"
OPTIMIZER_FILE = "optimizer.safetensors"


@dataclass
class TrainerState:
    """Where a run stands after ``step`` optimizer steps.

    Attributes:
        step: optimizer steps taken (over every leg of the run).
        epoch, batch: the position in the data: the next step takes step position ``batch`` of epoch ``epoch``.
        tokens_seen: non-pad source + target tokens trained on, all ranks together.
        train_seconds: training wall time of the run, every leg before this one included (seconds).
        best_valid_loss, best_step, best_metrics: validation loss (nats/token), step and BLEU/chrF of ``best/``.
        best_score: the ``--select`` score of ``best/`` (a loss or a chrF; ``None`` before the first evaluation).
        evals_since_best: evaluations since ``best/`` last improved (for ``--patience``).
        last_eval_step: the step of the last evaluation (``None`` before the first).
        world_size: data-parallel processes the run trains with (its batch positions count per-rank steps).
    """

    step: int = 0
    epoch: int = 0
    batch: int = 0
    tokens_seen: int = 0
    train_seconds: float = 0.0
    best_valid_loss: float | None = None
    best_step: int | None = None
    best_metrics: dict = field(default_factory=dict)
    best_score: float | None = None
    evals_since_best: int = 0
    last_eval_step: int | None = None
    world_size: int = 1

    # --- the trainer's changes ----------------------------------------------------------------------------------
    def advance(self, position: int, n_tokens: int) -> None:
        """One optimizer step taken at step position ``position`` of the epoch, on ``n_tokens`` tokens."""
        self.step += 1
        self.batch = position + 1
        self.tokens_seen += n_tokens

    def next_epoch(self) -> None:
        """The epoch is used up: the next step starts the next one."""
        self.epoch += 1
        self.batch = 0

    def set_train_seconds(self, seconds: float) -> None:
        """The run's training time so far (earlier legs included), as :func:`save_resume_state` will save it."""
        self.train_seconds = seconds

    def record_evaluation(self, metric: str, value: float, valid_loss: float, scores: dict) -> bool:
        """Count an evaluation at the current step: ``value`` of ``metric`` (``"loss"``: lower is better;
        ``"chrf"``: higher is better), with its ``valid_loss`` (nats/token) and ``scores`` (BLEU/chrF, ``{}`` for a
        language model). Returns whether it is the best so far, in which case it becomes ``best_*``; otherwise it
        counts towards ``--patience``."""
        self.last_eval_step = self.step
        best = self.best_score
        if best is None and metric == "loss":
            best = self.best_valid_loss  # a resume state from before --select
        if best is not None and not (value < best if metric == "loss" else value > best):
            self.evals_since_best += 1
            return False
        self.best_score, self.evals_since_best = value, 0
        self.best_valid_loss, self.best_step, self.best_metrics = round(valid_loss, 4), self.step, dict(scores)
        return True

    # --- the file -----------------------------------------------------------------------------------------------
    def to_dict(self) -> dict:
        """The JSON object of ``trainer_state.json``."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> TrainerState:
        """The state of a ``trainer_state.json`` object: a field it lacks (written by an older trainer) gets its
        default; a key that is no field (a newer trainer's) is ignored, since the position in the data, which
        makes a resume exact, is in the fields this trainer knows. Raises ``TypeError`` for a non-dict."""
        if not isinstance(data, dict):
            raise TypeError(f"a trainer state is a JSON object, not {type(data).__name__}")
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})


def read_state(folder: Path) -> TrainerState:
    """The :class:`TrainerState` in ``folder/trainer_state.json`` (a ``last/`` folder). Raises ``OSError`` when the
    file is missing and ``ValueError`` when it is no JSON object."""
    try:
        return TrainerState.from_dict(json.loads((Path(folder) / STATE_FILE).read_text()))
    except TypeError as exc:
        raise ValueError(f"{Path(folder) / STATE_FILE}: {exc}") from None


def save_resume_state(
    folder: Path, model, tok, opt, state: TrainerState, rng_states: list[torch.Tensor] | None = None
) -> None:
    """Write ``last/``: the model as a checkpoint, the optimizer's moments, ``state`` and the CPU RNG state of every
    rank (``rng_states[r]``; default: this process's only)."""
    save_checkpoint(folder, model, tok, card={"kind": "resume state", "step": state.step, "epoch": state.epoch})
    rng_states = rng_states or [torch.get_rng_state()]
    tensors = {"rng.torch": rng_states[0], **{f"rng.torch.{r}": t for r, t in enumerate(rng_states) if r}}
    for i, group in enumerate(opt.param_groups):
        for j, p in enumerate(group["params"]):
            for key, val in opt.state.get(p, {}).items():
                tensors[f"opt.{i}.{j}.{key}"] = val if torch.is_tensor(val) else torch.tensor(val)
    save_tensors(Path(folder) / OPTIMIZER_FILE, tensors)
    atomic_write_json(Path(folder) / STATE_FILE, state.to_dict())


def load_resume_state(folder: Path, opt, rank: int = 0) -> TrainerState:
    """Restore what :func:`save_resume_state` wrote into ``opt`` (whose parameters are the model already loaded from
    ``folder``) and this process's RNG (``rank``'s); returns the saved :class:`TrainerState`."""
    tensors = load_file(str(Path(folder) / OPTIMIZER_FILE))
    for i, group in enumerate(opt.param_groups):
        for j, p in enumerate(group["params"]):
            # Adam's step count stays on the CPU, as torch's own load_state_dict leaves it: on a GPU every
            # parameter's bias correction would read it back, one wait for the device per parameter and step.
            st = {
                k.split(".")[-1]: v if k.endswith(".step") else v.to(p.device)
                for k, v in tensors.items()
                if k.startswith(f"opt.{i}.{j}.")
            }
            if st:
                opt.state[p] = st
    torch.set_rng_state(tensors[f"rng.torch.{rank}" if rank else "rng.torch"])
    return read_state(folder)
