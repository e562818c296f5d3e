"""The training loop: a :class:`Trainer` set up from the options (a fresh model, a warm start or a resumed run),
then one optimizer step after another until a limit is reached, with logging, snapshots and evaluations between
steps. Every data-parallel rank takes the same steps; only rank 0 evaluates and writes files."""

from __future__ import annotations

import os
import signal
import time
from dataclasses import dataclass, replace
from pathlib import Path

import torch
from tqdm import tqdm

from corpora.files import DataError
from trainer.best import evaluate_during_training, save_best, score_best_on_test
from trainer.resume import resolve_config
from trainer.start import initial_state, model_to_train
from training.batches import (
    Batch,
    EpochPlan,
    collate,
    encode_examples,
    sequences_per_pair,
    with_bpe_dropout,
    word_dropout,
)
from training.checkpoints import GERMAN_PROBE_SENTENCES, snapshot
from training.config import TrainConfig
from training.data import load_data
from training.device import default_threads
from training.distributed import Dist, model_flops_utilization, peak_tflops_for, shard_batches, wrap_for_training
from training.flops import training_flops
from training.runs import MetricsLog, now_iso, read_status, snapshot_steps, write_status
from training.schedule import factor_for_peak, learning_rate, make_optimizer
from training.state import save_resume_state
from training.step import TrainStep

#: Why a run ended with state ``finished`` (any other reason, a signal, is ``stopped``).
FINISHED_REASONS = ("max_steps", "max_minutes", "patience")


@dataclass
class Window:
    """What happened since the last log line: steps, tokens (all ranks), this rank's FLOPs and summed loss (a
    0-d tensor once a step is counted, read only when logged)."""

    start: float
    steps: int = 0
    tokens: int = 0
    flops: float = 0.0
    loss: float | torch.Tensor = 0.0


class Trainer:
    """One run being trained: its :class:`~training.config.TrainConfig` (``config``; a warm start's as the
    checkpoint made it), model, data plan, optimizer and the resumable :class:`~training.state.TrainerState`
    (``state``), which only this class changes."""

    def __init__(self, config: TrainConfig, ctx: Dist, device: torch.device, given: set[str] | None = None):
        self.config, self.ctx, self.device, self.out = config, ctx, device, Path(config.out)
        sentences, phrases, words, valid = load_data(config)
        self.model, self.tok, self.cfg, config = model_to_train(config, ctx, device, given, sentences, phrases, words)
        self.config = config  # a warm start's has the checkpoint's model options
        train_tok = with_bpe_dropout(self.tok, config.bpe_dropout)  # never saved: checkpoints keep self.tok
        self.plan = EpochPlan(
            sentences,
            phrases,
            words,
            config,
            lambda pairs: encode_examples(train_tok, pairs, self.cfg),
            per_pair=sequences_per_pair(self.cfg),
            reencode=bool(config.bpe_dropout),
        )
        self.valid_ex = encode_examples(self.tok, valid, self.cfg)
        self.eval_pairs = valid[: config.eval_sentences or None]  # 0: all of them
        self.set_up_steps()
        self.factor = factor_for_peak(config.peak_lr, self.cfg.d_model, config.warmup)
        self.state = initial_state(config, ctx, self.opt)
        peak = config.peak_tflops or (
            peak_tflops_for(torch.cuda.get_device_name(device)) if device.type == "cuda" else None
        )
        self.peak_total = peak * ctx.world_size if peak else None
        self.snapshots = set(snapshot_steps(config.max_steps)) if config.snapshots else set()
        self.probes = GERMAN_PROBE_SENTENCES if config.reverse else None  # None: the model kind's own
        self.signal: str | None = None

    def set_up_steps(self) -> None:
        """The optimizer and the module each step calls (:class:`~training.step.TrainStep`, wrapped for DDP and
        ``--compile``), as the speed options of ``self.config`` say."""
        config = self.config
        self.opt = make_optimizer(self.model, config.weight_decay, config.fused_optimizer)
        step = TrainStep(self.model, self.cfg.pad_id, config.label_smoothing, self.device, config.precision)
        self.step_model = wrap_for_training(step, self.ctx, self.device, config.compile)

    def retune(self, **changes) -> None:
        """Change options that decide how fast a step runs, not what the model is (``fused_optimizer``,
        ``compile``, ``pad_multiple``, ``batch_tokens``), before the trainer has run: a new optimizer (fresh
        moments), step module and batch plan. For the throughput probe (:mod:`trainer.probe`)."""
        self.config = replace(self.config, **changes)
        self.plan.config = self.config
        self.set_up_steps()

    # --- the loop -----------------------------------------------------------------------------------------------
    def run(self) -> int:
        """Train until a limit, then evaluate, save ``last/`` and write the final status. Returns the exit code."""
        # The handlers are put back afterwards: left installed, they would keep this trainer (and under DDP the
        # process group its model holds) alive until interpreter exit, and swallow a later Ctrl-C in the caller.
        previous = {sig: signal.signal(sig, self.on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
        try:
            return self.train_and_finish()
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    def train_and_finish(self) -> int:
        self.started, self.base_seconds = time.time(), self.state.train_seconds
        self.log = MetricsLog(self.out, enabled=self.ctx.is_main)
        self.announce()
        self.bar = tqdm(
            total=self.config.max_steps,
            initial=self.state.step,
            unit="step",
            dynamic_ncols=True,
            disable=self.config.no_progress or not self.ctx.is_main,
        )
        self.window = Window(time.time())
        self.model.train()
        reason = self.train_steps()
        self.bar.close()
        return self.finish(reason)

    def train_steps(self) -> str:
        """Optimizer steps until one of ``--max-steps``, a signal, ``--max-minutes`` or ``--patience`` ends the run;
        returns which."""
        for b, examples, micro in self.step_batches():
            batches = self.collate(examples, micro)
            # Agreed by all ranks, so that none is left waiting in an all-reduce; n_tokens becomes the global count.
            halt, n_tokens = self.ctx.agree(self.local_stop_reason(), sum(x.n_tokens for x in batches))
            if halt:
                return halt
            lr = learning_rate(self.state.step + 1, self.cfg.d_model, self.config, self.factor)
            loss, grad_norm = self.optimizer_step(batches, lr)
            self.count_step(b, n_tokens, batches, loss)
            step = self.state.step
            if step % self.config.log_every == 0:
                self.log_progress(lr, grad_norm)
            if step in self.snapshots:
                self.take_snapshot()
            if step % self.config.eval_every == 0 or step == self.config.max_steps:
                self.evaluate()
                self.save_last()  # resumable even after a hard kill: the state as of this evaluation
                if self.out_of_patience():
                    return "patience"
        return "max_steps"

    def step_batches(self):
        """Yields ``(position, examples, micro-batches)`` of every step from the state's position on, epoch after
        epoch, until ``--max-steps``; advances the state's epoch when one is used up."""
        while self.state.step < self.config.max_steps:
            examples, epoch_steps = self.plan.steps(self.state.epoch)
            batches = shard_batches(epoch_steps, self.ctx.rank, self.ctx.world_size)
            if not batches:
                raise DataError(
                    f"epoch {self.state.epoch} has {len(epoch_steps)} batch(es), fewer than the "
                    f"{self.ctx.world_size} process(es): use more data or a smaller --batch-tokens"
                )
            for b in range(self.state.batch, len(batches)):
                if self.state.step >= self.config.max_steps:
                    return
                yield b, examples, batches[b]
            self.state.next_epoch()

    def collate(self, examples, micro: list[list[int]]) -> list[Batch]:
        """The step's micro-batches (example indices) as padded :class:`Batch` es on the device."""
        return [
            collate(examples, idx, self.cfg.pad_id, self.device, self.config.pad_multiple, self.cfg.max_len)
            for idx in micro
        ]

    def optimizer_step(self, batches: list[Batch], lr: float) -> tuple[torch.Tensor, torch.Tensor]:
        """One Adam step at learning rate ``lr`` over the micro-batches (gradients summed, each weighted by its share
        of the step's predicted tokens, so the loss is the mean over all of them as if they were one batch).
        Returns ``(loss, gradient norm before clipping)`` as 0-d tensors on the device: reading them (``float``)
        waits for the GPU, so that is left to the log line, and the host can queue the next step meanwhile."""
        cfg, config = self.cfg, self.config
        for group in self.opt.param_groups:
            group["lr"] = lr
        self.opt.zero_grad(set_to_none=True)
        n_pred = sum(x.n_pred for x in batches)
        loss = torch.zeros((), device=self.device)
        for batch in batches:
            src = word_dropout(batch.src, config.src_word_dropout, cfg.unk_id, (cfg.pad_id, cfg.eos_id))
            tgt_in = word_dropout(
                batch.tgt_in, config.tgt_word_dropout, cfg.unk_id, (cfg.pad_id, cfg.bos_id, cfg.eos_id)
            )
            part = self.step_model(src, tgt_in, batch.tgt_out) * (batch.n_pred / max(n_pred, 1))
            part.backward()  # under DDP averaged over ranks
            loss += part.detach()
        grad_norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), config.clip)
        self.opt.step()
        return loss, grad_norm

    def count_step(self, b: int, n_tokens: int, batches: list[Batch], loss: torch.Tensor) -> None:
        """Advance the state past step position ``b`` and add the step to the log window."""
        self.state.advance(b, n_tokens)
        w = self.window
        w.steps, w.tokens, w.loss = w.steps + 1, w.tokens + n_tokens, w.loss + loss
        w.flops += training_flops(self.cfg, sum(x.n_src for x in batches), sum(x.n_pred for x in batches))
        self.bar.update(1)

    # --- between steps ------------------------------------------------------------------------------------------
    def on_signal(self, signum, _frame) -> None:
        self.signal = signal.Signals(signum).name

    def local_stop_reason(self) -> str | None:
        """Why this process wants to stop before the next step: the signal it caught, ``"max_minutes"`` once the
        wall time since it started reaches ``--max-minutes`` (0 = no limit), else ``None``."""
        if self.signal:
            return self.signal
        if self.config.max_minutes and (time.time() - self.started) / 60 >= self.config.max_minutes:
            return "max_minutes"
        return None

    def train_seconds(self) -> float:
        """Training time of the run so far, earlier processes (before a resume) included."""
        return self.base_seconds + time.time() - self.started

    def announce(self) -> None:
        """``status.json`` says running, with the limits; the step-0 snapshot of a fresh run.

        A resumed run is one run in several legs (processes): ``started`` stays the first leg's start, and this
        leg's start (``leg_started``, from which its ``--max-minutes`` counts), its number (``leg``) and the training
        seconds of the legs before it (``earlier_seconds``, as ``last/`` saved them) are recorded beside it, so
        that the page can show both this leg's minutes against its limit and the run's total."""
        if self.ctx.is_main:
            now = now_iso()
            before = (read_status(self.out) or {}) if self.config.resume else {}
            write_status(
                self.out,
                state="running",
                pid=os.getpid(),
                started=before.get("started") or now,
                leg_started=now,
                leg=(int(before.get("leg") or 1) + 1) if self.config.resume else 1,
                earlier_seconds=round(self.base_seconds, 1),
                step=self.state.step,
                max_steps=self.config.max_steps,
                max_minutes=self.config.max_minutes,
                reason=None,
                exit_code=None,
                error=None,
            )
            if 0 in self.snapshots and self.state.step == 0:
                snapshot(self.model, self.tok, self.out, 0, self.probes)
        self.ctx.barrier()

    def log_progress(self, lr: float, grad_norm: torch.Tensor) -> None:
        """One ``metrics.jsonl`` line for the window since the last (loss averaged over ranks); a new window."""
        w, ctx, step = self.window, self.ctx, self.state.step
        elapsed = time.time() - w.start
        rec = {
            "step": step,
            "epoch": self.state.epoch,
            "loss": round(ctx.mean(float(w.loss) / w.steps), 4),
            "lr": lr,
            "grad_norm": round(float(grad_norm), 3),
            "tokens_per_s": round(w.tokens / elapsed, 1),
            "tokens_seen": self.state.tokens_seen,
            "time_s": round(self.train_seconds(), 1),
        }
        if self.peak_total:  # the same on every rank, so every rank joins the all-reduce
            # Every rank's FLOPs over this rank's window: the window tokens_per_s uses too, so the two agree
            # (each rank timing its own window made mfu depend on how far apart the ranks' clocks drifted).
            flops_per_s = ctx.mean(w.flops) * ctx.world_size / elapsed
            rec["mfu"] = float(f"{model_flops_utilization(flops_per_s, self.peak_total):.4g}")
        self.log(rec)
        if ctx.is_main:
            write_status(self.out, step=step)
        self.bar.set_postfix(loss=f"{rec['loss']:.3f}", tok_s=f"{rec['tokens_per_s']:.0f}", lr=f"{lr:.2e}")
        self.window = Window(time.time())

    def take_snapshot(self) -> None:
        if self.ctx.is_main:
            snapshot(self.model, self.tok, self.out, self.state.step, self.probes)
        self.ctx.barrier()

    def evaluate(self) -> None:
        if self.ctx.is_main:
            seconds = self.train_seconds()
            ev = evaluate_during_training(
                self.model,
                self.tok,
                self.valid_ex,
                self.eval_pairs,
                self.config,
                self.device,
                self.state.step,
                self.out,
                self.log,
                seconds,
            )
            if self.state.record_evaluation(ev.metric, ev.value, ev.valid_loss, ev.scores):
                save_best(
                    self.model,
                    self.tok,
                    self.config,
                    self.device,
                    self.state,
                    ev,
                    self.out,
                    seconds,
                    self.ctx.world_size,
                )

    def out_of_patience(self) -> bool:
        """``--patience`` evaluations in a row without a better score; the same on every rank (rank 0's count)."""
        if not self.config.patience:
            return False
        return self.ctx.broadcast(self.state.evals_since_best) >= self.config.patience

    def save_last(self) -> None:
        """``last/`` as of now (every rank's RNG state gathered; rank 0 writes)."""
        self.state.set_train_seconds(self.train_seconds())
        rng_states = self.ctx.gather(torch.get_rng_state())
        if self.ctx.is_main:
            save_resume_state(self.out / "last", self.model, self.tok, self.opt, self.state, rng_states)
        self.ctx.barrier()

    def finish(self, reason: str) -> int:
        """Evaluate the last step if it was not, save ``last/``, score on the test split (``--test-at-end``) and
        write the final status (``finished`` for a limit, ``stopped`` for a signal)."""
        if self.state.last_eval_step != self.state.step and self.state.step > 0:
            self.evaluate()
        self.save_last()
        if not self.ctx.is_main:
            return 0
        if self.config.test_at_end and (self.out / "best").is_dir():
            score_best_on_test(self.out, self.config, self.device, self.state.step, self.log)
        self.log({"step": self.state.step, "event": "stopped", "reason": reason})
        self.log.close()
        write_status(
            self.out,
            state="finished" if reason in FINISHED_REASONS else "stopped",
            step=self.state.step,
            reason=reason,
            exit_code=0,
        )
        s = self.state
        print(
            f"stopped at step {s.step} ({reason}); best at step {s.best_step} "
            f"(valid loss {s.best_valid_loss}, {s.best_metrics or {}})"
        )
        return 0


def train_loop(config: TrainConfig, ctx: Dist, device: torch.device, given: set[str] | None = None) -> int:
    """Train ``config`` (as :func:`~trainer.resume.resolve_config` resolves it) as this process of ``ctx`` on
    ``device``; ``given``: the options written on the command line (``None``: all of them). Returns the exit code;
    raises ``DataError``/``ValueError`` for a run that cannot start."""
    return make_trainer(config, ctx, device, given).run()


def make_trainer(config: TrainConfig, ctx: Dist, device: torch.device, given: set[str] | None = None) -> Trainer:
    """The :class:`Trainer` of ``config`` set up as :func:`train_loop` trains it (resolved options, CPU threads,
    seed), not yet run. Raises ``DataError``/``ValueError`` for a run that cannot start."""
    config = resolve_config(config, ctx, given)  # first: a bare --resume trains with the run's saved --threads
    if device.type == "cpu":
        torch.set_num_threads(config.threads or default_threads(ctx.world_size))
    torch.manual_seed(config.seed)
    return Trainer(config, ctx, device, given)
