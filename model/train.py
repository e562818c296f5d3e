"""Train a Transformer translator: ``python -m model.train --out runs/NAME [options]``.

The recipe of Vaswani et al. (2017), §5, scaled down: Adam (β₁ 0.9, β₂ 0.98, ε 1e-9), the warmup +
inverse-square-root learning rate of eq. (3), label smoothing 0.1, dropout, batches bucketed by length under
a token budget, gradient clipping, a seed.

The run folder holds ``config.json`` (model), ``train_args.json``, ``metrics.jsonl`` (one JSON object per log
step or evaluation), ``best/`` (the checkpoint with the lowest validation loss) and ``last/`` (checkpoint +
optimizer + trainer state, for ``--resume``, which continues the run exactly). SIGTERM/SIGINT stop
gracefully after the current step, writing ``last/``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import signal
import sys
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import torch
import torch.nn.functional as F
from safetensors.torch import load_file
from tqdm import tqdm

from .checkpoint import Checkpoint, atomic_write_json, load_checkpoint, save_checkpoint, save_tensors
from .config import ConfigError, ModelConfig
from .data import DataError, Pair, dataset_path, read_tsv
from .decoding import translate_texts
from .metrics import bleu_chrf
from .runs import now_iso, probe_record, snapshot_steps, write_status
from .tokenizer import TextTokenizer
from .baseline import IMPLS, build_model, load_baseline


def noam_lr(step: int, d_model: int, warmup: int, factor: float = 1.0) -> float:
    """Learning rate of paper eq. (3): ``factor · d_model^-0.5 · min(step^-0.5, step · warmup^-1.5)`` (step ≥ 1)."""
    step = max(step, 1)
    return factor * d_model**-0.5 * min(step**-0.5, step * warmup**-1.5)


def factor_for_peak(peak_lr: float, d_model: int, warmup: int) -> float:
    """The ``factor`` of :func:`noam_lr` whose maximum (at ``step = warmup``) equals ``peak_lr``."""
    return peak_lr / noam_lr(warmup, d_model, warmup)


def pick_device(name: str) -> torch.device:
    """``auto`` → CUDA when available, else CPU. Raises ``ValueError`` for CUDA asked where there is none."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise ValueError("--device cuda was asked for, but no CUDA GPU is available")
    return torch.device(name)


@dataclass
class Example:
    src: list[int]
    tgt: list[int]  # <bos> … <eos>

    @property
    def size(self) -> int:
        return max(len(self.src), len(self.tgt))


def encode_pairs(tok: TextTokenizer, pairs: list[Pair], cfg: ModelConfig) -> list[Example]:
    """Tokenize pairs, dropping those that do not fit ``max_len`` (src gets ``<eos>``, tgt ``<bos> … <eos>``)."""
    src = tok.encode_batch([p.src for p in pairs])
    tgt = tok.encode_batch([p.tgt for p in pairs])
    out = []
    for s, t in zip(src, tgt):
        if s and t and len(s) + 1 <= cfg.max_len and len(t) + 2 <= cfg.max_len:
            out.append(Example(s + [cfg.eos_id], [cfg.bos_id] + t + [cfg.eos_id]))
    return out


def make_batches(examples: list[Example], batch_tokens: int, gen: torch.Generator) -> list[list[int]]:
    """Indices grouped by similar length so that ``batch × (padded src + padded tgt) ≤ batch_tokens``, shuffled."""
    noise = torch.rand(len(examples), generator=gen).tolist()
    order = sorted(range(len(examples)), key=lambda i: (examples[i].size, noise[i]))
    batches, cur, cur_max = [], [], 0
    for i in order:
        ex = examples[i]
        new_max = max(cur_max, len(ex.src) + len(ex.tgt))
        if cur and new_max * (len(cur) + 1) > batch_tokens:
            batches.append(cur)
            cur, new_max = [], len(ex.src) + len(ex.tgt)
        cur.append(i)
        cur_max = new_max
    if cur:
        batches.append(cur)
    perm = torch.randperm(len(batches), generator=gen).tolist()
    return [batches[p] for p in perm]


def collate(examples: list[Example], idx: list[int], pad: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    """Padded ``src [batch, src_len]`` and ``tgt [batch, tgt_len]``."""
    s_len = max(len(examples[i].src) for i in idx)
    t_len = max(len(examples[i].tgt) for i in idx)
    src = torch.full((len(idx), s_len), pad, dtype=torch.long)
    tgt = torch.full((len(idx), t_len), pad, dtype=torch.long)
    for row, i in enumerate(idx):
        src[row, : len(examples[i].src)] = torch.tensor(examples[i].src)
        tgt[row, : len(examples[i].tgt)] = torch.tensor(examples[i].tgt)
    return src.to(device), tgt.to(device)


class EpochPlan:
    """The training examples of one epoch: sentences × repeat plus a fresh sample of phrases and words.

    Deterministic in ``(seed, epoch)``, which is what makes ``--resume`` exact.
    """

    def __init__(self, sentences, phrases, words, args):
        self.sentences, self.phrases, self.words, self.args = sentences, phrases, words, args

    def examples(self, epoch: int) -> tuple[list[Example], list[list[int]]]:
        gen = torch.Generator().manual_seed(self.args.seed * 100_003 + epoch)
        chosen = self.sentences * self.args.sentence_repeat
        for pool, n in ((self.phrases, self.args.phrases_per_epoch), (self.words, self.args.words_per_epoch)):
            if pool and n:
                pick = torch.randperm(len(pool), generator=gen)[: min(n, len(pool))].tolist()
                chosen = chosen + [pool[i] for i in pick]
        return chosen, make_batches(chosen, self.args.batch_tokens, gen)


def load_data(args) -> tuple[list[Pair], list[Pair], list[Pair], list[Pair]]:
    """``(sentences, phrases, words, valid)`` pairs from the shipped corpus or the user's TSV files."""
    data_dir = Path(args.data_dir)
    sentences = read_tsv(args.train_tsv or dataset_path("train", data_dir))
    valid = read_tsv(args.valid_tsv or dataset_path("valid", data_dir))
    phrases = read_tsv(dataset_path("phrases", data_dir)) if args.phrases_per_epoch and not args.train_tsv else []
    words = read_tsv(dataset_path("words", data_dir)) if args.words_per_epoch and not args.train_tsv else []
    if args.limit_train:
        sentences = sentences[: args.limit_train]
    return sentences, phrases, words, valid


def loss_fn(logits: torch.Tensor, target: torch.Tensor, pad: int, smoothing: float) -> torch.Tensor:
    """Mean cross-entropy with label smoothing (paper §5.4) over non-pad target tokens."""
    return F.cross_entropy(logits.reshape(-1, logits.size(-1)).float(), target.reshape(-1),
                           ignore_index=pad, label_smoothing=smoothing)


@torch.no_grad()
def validation_loss(model, examples, args, device) -> float:
    """Token-averaged cross-entropy (no label smoothing) on ``examples``, in nats/token."""
    model.eval()
    total, count = 0.0, 0
    for idx in make_batches(examples, args.batch_tokens * 2, torch.Generator().manual_seed(0)):
        src, tgt = collate(examples, idx, model.cfg.pad_id, device)
        with autocast(device):
            logits = model(src, tgt[:, :-1])
        n = int((tgt[:, 1:] != model.cfg.pad_id).sum())
        total += float(loss_fn(logits, tgt[:, 1:], model.cfg.pad_id, 0.0)) * n
        count += n
    model.train()
    return total / max(count, 1)


def autocast(device: torch.device):
    """bf16 autocast on CUDA, a no-op elsewhere."""
    return torch.autocast("cuda", dtype=torch.bfloat16) if device.type == "cuda" else torch.autocast("cpu", enabled=False)


def score(model, tok, pairs: list[Pair]) -> dict[str, float]:
    model.eval()
    hyps = translate_texts(model, tok, [p.src for p in pairs])
    model.train()
    return bleu_chrf(hyps, [p.tgt for p in pairs])


def load_any(folder: Path, impl: str, device):
    """A checkpoint of either implementation, as ``(model, tokenizer, config, card)``."""
    if impl == "ours":
        return load_checkpoint(folder, device)
    model = load_baseline(folder, device)
    card = json.loads((folder / "card.json").read_text()) if (folder / "card.json").is_file() else {}
    return Checkpoint(model, TextTokenizer.from_file(folder / "tokenizer.json"), model.cfg, card, folder)


def hardware() -> str:
    if torch.cuda.is_available():
        return torch.cuda.get_device_name(0)
    return f"CPU ({platform.processor() or platform.machine()}, {os.cpu_count()} cores, {torch.get_num_threads()} threads)"


# --- resume state ---------------------------------------------------------------------------------
def save_last(folder: Path, model, tok, opt, state: dict) -> None:
    save_checkpoint(folder, model, tok, card={"kind": "resume state", **{k: state[k] for k in ("step", "epoch")}})
    tensors = {"rng.torch": torch.get_rng_state()}
    for i, group in enumerate(opt.param_groups):
        for j, p in enumerate(group["params"]):
            for key, val in opt.state.get(p, {}).items():
                tensors[f"opt.{i}.{j}.{key}"] = val if torch.is_tensor(val) else torch.tensor(val)
    save_tensors(folder / "optimizer.safetensors", tensors)
    atomic_write_json(folder / "trainer_state.json", state)


def load_last(folder: Path, model, opt) -> dict:
    tensors = load_file(str(folder / "optimizer.safetensors"))
    for i, group in enumerate(opt.param_groups):
        for j, p in enumerate(group["params"]):
            st = {k.split(".")[-1]: v.to(p.device) for k, v in tensors.items() if k.startswith(f"opt.{i}.{j}.")}
            if st:
                opt.state[p] = st
    torch.set_rng_state(tensors["rng.torch"])
    return json.loads((folder / "trainer_state.json").read_text())


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m model.train", description="Train an EN→DE Transformer.")
    p.add_argument("--out", required=True, help="run folder (created)")
    p.add_argument("--resume", action="store_true", help="continue the run in --out exactly where it stopped")
    g = p.add_argument_group("data")
    g.add_argument("--data-dir", default=str(dataset_path("train").parent))
    g.add_argument("--train-tsv", help="your own source<TAB>target training file (replaces the shipped sentences)")
    g.add_argument("--valid-tsv", help="validation file (default: the shipped valid split)")
    g.add_argument("--sentence-repeat", type=int, default=1, help="upsample the sentence pairs this many times")
    g.add_argument("--phrases-per-epoch", type=int, default=0, help="phrase pairs sampled into each epoch")
    g.add_argument("--words-per-epoch", type=int, default=0, help="word pairs sampled into each epoch")
    g.add_argument("--limit-train", type=int, default=0, help="use only the first N sentence pairs (smoke tests)")
    g.add_argument("--vocab-size", type=int, default=8000)
    g = p.add_argument_group("model")
    g.add_argument("--arch", default="encoder-decoder", choices=["encoder-decoder"])
    g.add_argument("--impl", default="ours", choices=IMPLS,
                   help="ours = this project's Transformer; torch = the torch.nn.Transformer baseline (model/baseline.py)")
    g.add_argument("--d-model", type=int, default=256)
    g.add_argument("--n-heads", type=int, default=4)
    g.add_argument("--layers", type=int, default=3, help="encoder and decoder layers each")
    g.add_argument("--d-ff", type=int, default=1024)
    g.add_argument("--dropout", type=float, default=0.1)
    g.add_argument("--pos-encoding", default="sinusoidal")
    g.add_argument("--norm-first", action="store_true", help="pre-LN (default: post-LN as in the paper)")
    g.add_argument("--max-len", type=int, default=128)
    g = p.add_argument_group("optimisation")
    g.add_argument("--peak-lr", type=float, default=1e-3, help="learning rate at the end of warmup")
    g.add_argument("--warmup", type=int, default=4000)
    g.add_argument("--label-smoothing", type=float, default=0.1)
    g.add_argument("--batch-tokens", type=int, default=2000, help="padded src+tgt tokens per batch")
    g.add_argument("--clip", type=float, default=1.0, help="gradient-norm clip")
    g.add_argument("--max-steps", type=int, default=10_000)
    g.add_argument("--max-minutes", type=float, default=0, help="stop after this wall time (0 = no limit)")
    g.add_argument("--seed", type=int, default=1)
    g.add_argument("--device", default="auto")
    g.add_argument("--threads", type=int, default=0, help="CPU threads (0 = torch default)")
    g = p.add_argument_group("logging")
    g.add_argument("--log-every", type=int, default=50)
    g.add_argument("--eval-every", type=int, default=1000)
    g.add_argument("--eval-sentences", type=int, default=300, help="valid sentences translated for BLEU/chrF")
    g.add_argument("--test-at-end", action="store_true", help="score best/ on the shipped test split at the end")
    g.add_argument("--fp16-weights", action="store_true", help="store best/ weights in float16 (half the size)")
    g.add_argument("--no-progress", action="store_true")
    g.add_argument("--no-snapshots", dest="snapshots", action="store_false",
                   help="skip the log-spaced checkpoints/step-N/ and probes.jsonl")
    return p


def run(args) -> int:
    out = Path(args.out)
    device = pick_device(args.device)
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    last = out / "last"
    if args.resume:
        if not (last / "trainer_state.json").is_file():
            raise DataError(f"nothing to resume in {out} (no last/trainer_state.json)")
        saved = json.loads((out / "train_args.json").read_text())
        for k in ("resume", "max_steps", "max_minutes", "no_progress", "threads", "device", "test_at_end", "snapshots"):
            saved[k] = getattr(args, k)
        args = argparse.Namespace(**saved)
    args.impl = getattr(args, "impl", "ours")  # runs from before --impl existed
    if args.impl != "ours":
        args.snapshots = False  # probes need our traced attention
    # After the resume block: a resumed run reads the data of the saved arguments, not the CLI defaults.
    sentences, phrases, words, valid = load_data(args)
    if args.resume:
        ckpt = load_any(last, args.impl, device)
        model, tok, cfg = ckpt.model, ckpt.tokenizer, ckpt.config
        model.train()
    else:
        out.mkdir(parents=True, exist_ok=True)
        tok = TextTokenizer.train(
            [t for p in sentences + phrases + words for t in (p.src, p.tgt)], vocab_size=args.vocab_size
        )
        cfg = ModelConfig(
            arch=args.arch, vocab_size=tok.vocab_size, d_model=args.d_model, n_heads=args.n_heads,
            n_encoder_layers=args.layers, n_decoder_layers=args.layers, d_ff=args.d_ff, dropout=args.dropout,
            pos_encoding=args.pos_encoding, norm_first=args.norm_first, max_len=args.max_len,
        )
        model = build_model(cfg, args.impl).to(device)
        atomic_write_json(out / "train_args.json", vars(args))
        cfg.to_json(out / "config.json")
    sent_ex = encode_pairs(tok, sentences, cfg)
    plan = EpochPlan(sent_ex, encode_pairs(tok, phrases, cfg), encode_pairs(tok, words, cfg), args)
    valid_ex = encode_pairs(tok, valid, cfg)
    eval_pairs = valid[: args.eval_sentences]
    opt = torch.optim.Adam(model.parameters(), lr=0.0, betas=(0.9, 0.98), eps=1e-9)
    factor = factor_for_peak(args.peak_lr, cfg.d_model, args.warmup)
    state = {"step": 0, "epoch": 0, "batch": 0, "tokens_seen": 0, "train_seconds": 0.0, "best_valid_loss": None,
             "best_step": None, "best_metrics": {}}
    if args.resume:
        state = load_last(last, model, opt)
    stop = {"signal": None}

    def on_signal(signum, _frame):
        stop["signal"] = signal.Signals(signum).name

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    metrics_file = open(out / "metrics.jsonl", "a", encoding="utf-8")

    def log(record: dict) -> None:
        metrics_file.write(json.dumps(record) + "\n")
        metrics_file.flush()

    started = time.time()
    base_seconds = state["train_seconds"]
    snapshots = set(snapshot_steps(args.max_steps)) if args.snapshots else set()
    write_status(out, state="running", pid=os.getpid(), started=now_iso(), step=state["step"],
                 max_steps=args.max_steps, reason=None, exit_code=None, error=None)
    if 0 in snapshots and state["step"] == 0:
        snapshot(model, tok, out, 0)
    bar = tqdm(total=args.max_steps, initial=state["step"], disable=args.no_progress, unit="step", dynamic_ncols=True)
    window_tokens, window_start, window_loss, window_n = 0, time.time(), 0.0, 0
    model.train()
    reason = "max_steps"
    while state["step"] < args.max_steps:
        examples, batches = plan.examples(state["epoch"])
        for b in range(state["batch"], len(batches)):
            if state["step"] >= args.max_steps:
                break
            if stop["signal"] or (args.max_minutes and (time.time() - started) / 60 >= args.max_minutes):
                break
            src, tgt = collate(examples, batches[b], cfg.pad_id, device)
            lr = noam_lr(state["step"] + 1, cfg.d_model, args.warmup, factor)
            for group in opt.param_groups:
                group["lr"] = lr
            with autocast(device):
                logits = model(src, tgt[:, :-1])
            loss = loss_fn(logits, tgt[:, 1:], cfg.pad_id, args.label_smoothing)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            grad_norm = float(torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip))
            opt.step()
            n_tokens = int((src != cfg.pad_id).sum() + (tgt != cfg.pad_id).sum())
            state["step"] += 1
            state["batch"] = b + 1
            state["tokens_seen"] += n_tokens
            window_tokens += n_tokens
            window_loss += loss.item()
            window_n += 1
            bar.update(1)
            if state["step"] % args.log_every == 0:
                elapsed = time.time() - window_start
                rec = {"step": state["step"], "epoch": state["epoch"], "loss": round(window_loss / window_n, 4),
                       "lr": lr, "grad_norm": round(grad_norm, 3), "tokens_per_s": round(window_tokens / elapsed, 1),
                       "tokens_seen": state["tokens_seen"], "time_s": round(base_seconds + time.time() - started, 1)}
                log(rec)
                write_status(out, step=state["step"])
                bar.set_postfix(loss=f"{rec['loss']:.3f}", tok_s=f"{rec['tokens_per_s']:.0f}", lr=f"{lr:.2e}")
                window_tokens, window_start, window_loss, window_n = 0, time.time(), 0.0, 0
            if state["step"] in snapshots:
                snapshot(model, tok, out, state["step"])
            if state["step"] % args.eval_every == 0 or state["step"] == args.max_steps:
                evaluate_and_save(model, tok, valid_ex, eval_pairs, args, device, state, out, log, base_seconds, started)
                # Resumable even after a hard kill: the resume state as of this evaluation.
                state["train_seconds"] = base_seconds + time.time() - started
                save_last(last, model, tok, opt, state)
        else:
            state["epoch"] += 1
            state["batch"] = 0
            continue
        reason = stop["signal"] or ("max_minutes" if state["step"] < args.max_steps else "max_steps")
        break
    bar.close()
    state["train_seconds"] = base_seconds + time.time() - started
    if state.get("last_eval_step") != state["step"] and state["step"] > 0:
        evaluate_and_save(model, tok, valid_ex, eval_pairs, args, device, state, out, log, base_seconds, started)
    save_last(last, model, tok, opt, state)
    if args.test_at_end and (out / "best").is_dir():
        best = load_any(out / "best", args.impl, device)
        test = read_tsv(dataset_path("test", Path(args.data_dir)))
        test_scores = score(best.model, best.tokenizer, test)
        card = best.card
        card["test"] = {"split": "Ding test sentences", "sentences": len(test), **test_scores}
        atomic_write_json(out / "best" / "card.json", card)
        log({"step": state["step"], "test_bleu": test_scores["bleu"], "test_chrf": test_scores["chrf"]})
        print(f"test BLEU {test_scores['bleu']:.2f}  chrF {test_scores['chrf']:.2f}")
    log({"step": state["step"], "event": "stopped", "reason": reason})
    metrics_file.close()
    write_status(out, state="finished" if reason in ("max_steps", "max_minutes") else "stopped", step=state["step"],
                 reason=reason, exit_code=0)
    print(f"stopped at step {state['step']} ({reason}); best valid loss {state['best_valid_loss']} at step {state['best_step']}")
    return 0


def snapshot(model, tok, out: Path, step: int) -> None:
    """Checkpoint ``checkpoints/step-N/`` (fp16) and the probe sentences' attention in ``probes.jsonl``."""
    save_checkpoint(out / "checkpoints" / f"step-{step}", model, tok, {"step": step, "kind": "snapshot"},
                    dtype=torch.float16)
    with open(out / "probes.jsonl", "a", encoding="utf-8") as f:
        f.write(json.dumps(probe_record(model, tok, step), ensure_ascii=False) + "\n")


def evaluate_and_save(model, tok, valid_ex, eval_pairs, args, device, state, out, log, base_seconds, started) -> None:
    """Validation loss + BLEU/chrF; writes ``best/`` when the loss improved (with its card)."""
    state["last_eval_step"] = state["step"]
    v_loss = validation_loss(model, valid_ex, args, device)
    scores = score(model, tok, eval_pairs)
    train_seconds = base_seconds + time.time() - started
    log({"step": state["step"], "valid_loss": round(v_loss, 4), "valid_bleu": scores["bleu"], "valid_chrf": scores["chrf"],
         "time_s": round(train_seconds, 1)})
    tqdm.write(f"step {state['step']}: valid loss {v_loss:.3f}  BLEU {scores['bleu']:.1f}  chrF {scores['chrf']:.1f}")
    if state["best_valid_loss"] is None or v_loss < state["best_valid_loss"]:
        state["best_valid_loss"], state["best_step"], state["best_metrics"] = round(v_loss, 4), state["step"], scores
        card = {
            "task": "English → German translation",
            "data": {"train": "Ding dictionary sentence pairs (GPL-2+)" if not args.train_tsv else args.train_tsv,
                     "sentence_repeat": args.sentence_repeat, "phrases_per_epoch": args.phrases_per_epoch,
                     "words_per_epoch": args.words_per_epoch},
            "step": state["step"], "epoch": state["epoch"], "tokens_seen": state["tokens_seen"],
            "train_minutes": round(train_seconds / 60, 1), "hardware": hardware(), "device": str(device),
            "parameters": model.num_parameters(),
            "valid": {"loss": round(v_loss, 4), "sentences": len(eval_pairs), **scores},
            "recipe": {k: getattr(args, k) for k in ("peak_lr", "warmup", "label_smoothing", "batch_tokens", "dropout",
                                                      "norm_first", "seed", "clip")},
            "date": datetime.now(timezone.utc).strftime("%Y-%m-%d"),
            "torch": torch.__version__,
        }
        if args.impl != "ours":
            card["impl"] = "torch.nn.Transformer baseline (model/baseline.py)"

        save_checkpoint(out / "best", model, tok, card, dtype=torch.float16 if args.fp16_weights else None)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return run(args)
    except (DataError, ConfigError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        if Path(args.out).is_dir():
            write_status(Path(args.out), state="failed", exit_code=2, error=str(exc))
        return 2
    except BaseException as exc:  # a crash: say so in status.json, then let it propagate
        if Path(args.out).is_dir():
            write_status(Path(args.out), state="failed", exit_code=1, error=f"{type(exc).__name__}: {exc}")
        raise


if __name__ == "__main__":
    sys.exit(main())
