"""Score a checkpoint: ``python -m evaluation.evaluate --checkpoint DIR [--tsv FILE | --text FILE] [--limit N]``.

``--suite``: a translator on every evaluation set found here, greedy and beam, in one table
(:mod:`evaluation.suite`); ``--suite --pieces``: how its tokenizer cuts FLORES, Multi30K and newstest (no translation).

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

import torch

from corpora.brown import brown_path, read_lines
from corpora.files import DataError, Pair, dataset_path, read_tsv
from corpora.parallel import PREPARED, SHARED_DATA
from decoding.batched import translate_texts
from decoding.beam import check_beam_size
from decoding.sampling import SamplingError
from decoding.translate import DEFAULT_CHECKPOINT
from evaluation.metrics import bleu_chrf
from evaluation.suite import SUITE_ALPHA, SUITE_BEAM, main_suite, translate
from model.checkpoint import CheckpointError, load_checkpoint
from training.batches import collate, encode_examples, loss_fn, make_batches
from training.data import monolingual
from training.device import autocast

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
    total, count = torch.zeros((), dtype=torch.float64, device=device), 0
    for idx in make_batches(examples, batch_tokens * 2, torch.Generator().manual_seed(0)):
        batch = collate(examples, idx, model.cfg.pad_id, device)
        with autocast(device, precision):
            logits = model(batch.src, batch.tgt_in)
        # summed on the device and read once: a read per batch would make the host wait for each batch in turn
        total += loss_fn(logits, batch.tgt_out, model.cfg.pad_id, 0.0).double() * batch.n_pred
        count += batch.n_pred
    model.train()
    return float(total) / max(count, 1)


def perplexity(loss: float) -> float:
    """``exp(loss)`` for a cross-entropy in nats/token (``inf`` where it overflows)."""
    try:
        return math.exp(loss)
    except OverflowError:
        return math.inf


def score(model, tok, pairs: list[Pair], batch_size: int = 64) -> dict[str, float]:
    """Corpus BLEU and chrF (0–100) of greedy translations of ``pairs`` (encoder-decoder only), ``batch_size``
    sentences at once; leaves ``model`` in training mode."""
    model.eval()
    hyps = translate_texts(model, tok, [p.src for p in pairs], batch_size=batch_size)
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
    return {
        "sequences": len(examples),
        "tokens": sum(len(e.tgt) - 1 for e in examples),
        **loss_scores(ckpt, examples, batch_tokens),
    }


def loss_scores(ckpt, examples, batch_tokens: int = 4000, precision: str = "auto") -> dict:
    """``{"loss", "perplexity"}`` of ``ckpt`` on encoded ``examples`` (:func:`validation_loss`: nats/token, no
    label smoothing), rounded for printing; leaves the model in evaluation mode."""
    loss = validation_loss(ckpt.model, examples, batch_tokens, ckpt.model.device, precision)
    ckpt.model.eval()
    return {"loss": round(loss, 4), "perplexity": round(perplexity(loss), 2)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m evaluation.evaluate", description=__doc__.split("\n")[0])
    p.add_argument("--checkpoint", default=str(DEFAULT_CHECKPOINT))
    p.add_argument("--tsv", default=str(dataset_path("test")), help="a translator's test pairs")
    p.add_argument(
        "--text",
        default=str(brown_path("test")),
        help="a language model's test text, one sentence per line (plain or .gz)",
    )
    p.add_argument("--limit", type=int, default=0, help="score only the first N pairs")
    p.add_argument("--show", type=int, default=0, help="print the first N source / reference / output triples")
    p.add_argument(
        "--strategy",
        choices=["greedy", "beam"],
        default=DEFAULT_STRATEGY,
        help=f"a translator's decoding (default {DEFAULT_STRATEGY}: see DEFAULT_STRATEGY)",
    )
    p.add_argument("--beam", type=int, default=SUITE_BEAM, help="beam width k, 1-16 (with --strategy beam or --suite)")
    p.add_argument(
        "--alpha",
        type=float,
        default=SUITE_ALPHA,
        help="GNMT length penalty exponent (with --strategy beam or --suite)",
    )
    p.add_argument(
        "--loop-guard",
        type=int,
        default=0,
        metavar="TIMES",
        help="ban every token that would write a phrase TIMES times in a row (3: no loops, and German's "
        '"die die" stays; 2: no repeat at all); default 0, plain decoding',
    )
    p.add_argument(
        "--loss",
        action="store_true",
        help="a translator: also the references' loss (nats/token, no label smoothing) and perplexity",
    )
    p.add_argument(
        "--suite",
        action="store_true",
        help="a translator on every evaluation set here (Ding test, "
        "everyday, Multi30K, BConTrasT, Tatoeba, newstest2014, FLORES-200 devtest), greedy and beam, plus "
        "the goal sentences and a repeated-word check",
    )
    p.add_argument(
        "--pieces",
        action="store_true",
        help="with --suite: no translation, only the tokenizer's pieces "
        "per word, split-word and unknown-piece rates on FLORES, Multi30K test2016 and newstest2014 (or "
        "--suite-sets)",
    )
    p.add_argument(
        "--suite-strategies",
        dest="strategy_set",
        choices=["greedy", "beam", "both"],
        default="both",
        help="with --suite: which decodings to score (default both)",
    )
    p.add_argument(
        "--suite-sets",
        default="",
        help="with --suite: only these sets, comma-separated as the table "
        'names them (e.g. "everyday,tatoeba held-out"; default: every set)',
    )
    p.add_argument("--prepared", default=str(PREPARED), help="with --suite: the prepared corpora folder")
    p.add_argument(
        "--shared",
        default=str(SHARED_DATA),
        help="with --suite: the folder holding eval/ (newstest) and extra/eval/ (FLORES)",
    )
    p.add_argument("--json", default="", help="with --suite: also write the report to this JSON file")
    p.add_argument(
        "--threads",
        type=int,
        default=0,
        help="torch threads (0 = torch's default). Beside a training run give 1: two threads wait for "
        "the core the trainer holds, and a 1,600-sentence evaluation took 428 s instead of 11 s",
    )
    args = p.parse_args(argv)
    if args.loop_guard == 1 or args.loop_guard < 0:
        p.error(f"--loop-guard must be 0 (off) or 2 or more, got {args.loop_guard}")
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
    hyps = translate(ckpt.model, ckpt.tokenizer, sources, args.strategy, args.beam, args.alpha, args.loop_guard)
    decoding = (
        {"strategy": "beam", "beam": args.beam, "alpha": args.alpha}
        if args.strategy == "beam"
        else {"strategy": "greedy"}
    )
    seconds = time.perf_counter() - start
    for pair, hyp in list(zip(pairs, hyps, strict=True))[: args.show]:
        print(f"SRC {pair.src}\nREF {pair.tgt}\nOUT {hyp}\n")
    scores = bleu_chrf(hyps, [p.tgt for p in pairs])
    if args.loss:
        scores.update(loss_scores(ckpt, encode_examples(ckpt.tokenizer, pairs, ckpt.config), precision="fp32"))
    print(json.dumps({"tsv": args.tsv, "sentences": len(pairs), **decoding, **scores, "seconds": round(seconds, 1)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
