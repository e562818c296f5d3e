"""Score a checkpoint: ``python -m model.evaluate --checkpoint DIR [--tsv FILE | --text FILE] [--limit N]``.

A translator: corpus BLEU and chrF (sacreBLEU) of greedy translations against the TSV's second column (default:
the shipped Ding test split). A decoder-only language model: loss (nats/token, no label smoothing) and
perplexity = exp(loss) on a text file, one sentence per line (default: the shipped Brown test split).
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from .brown import brown_path, read_lines
from .checkpoint import CheckpointError, load_checkpoint
from .data import DataError, dataset_path, read_tsv
from .decoding import translate_texts
from .metrics import bleu_chrf
from .train import encode_examples, monolingual, perplexity, validation_loss
from .translate import DEFAULT_CHECKPOINT


def language_model_scores(ckpt, texts: list[str], batch_tokens: int = 4000) -> dict:
    """``{"sequences", "tokens", "loss", "perplexity"}`` of a decoder-only checkpoint on ``texts``: the mean
    next-token cross-entropy in nats/token over ``<bos> text <eos>`` (the training loss without label smoothing).

    Raises:
        DataError: no text could be encoded (all empty or longer than the model's ``max_len``).
    """
    examples = encode_examples(ckpt.tokenizer, monolingual(texts), ckpt.config)
    if not examples:
        raise DataError("no usable sentence to score")
    loss = validation_loss(ckpt.model, examples, argparse.Namespace(batch_tokens=batch_tokens), ckpt.model.device)
    ckpt.model.eval()
    return {"sequences": len(examples), "tokens": sum(len(e.tgt) - 1 for e in examples),
            "loss": round(loss, 4), "perplexity": round(perplexity(loss), 2)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m model.evaluate", description=__doc__.split("\n")[0])
    p.add_argument("--checkpoint", default=str(DEFAULT_CHECKPOINT))
    p.add_argument("--tsv", default=str(dataset_path("test")), help="a translator's test pairs")
    p.add_argument("--text", default=str(brown_path("test")),
                   help="a language model's test text, one sentence per line (plain or .gz)")
    p.add_argument("--limit", type=int, default=0, help="score only the first N pairs")
    p.add_argument("--show", type=int, default=0, help="print the first N source / reference / output triples")
    args = p.parse_args(argv)
    try:
        ckpt = load_checkpoint(args.checkpoint)
        if not ckpt.config.is_encoder_decoder:
            start = time.perf_counter()
            texts = read_lines(args.text)[: args.limit or None]
            scores = language_model_scores(ckpt, texts)
            print(json.dumps({"text": args.text, **scores, "seconds": round(time.perf_counter() - start, 1)}))
            return 0
        pairs = read_tsv(args.tsv, limit=args.limit or None)
    except (CheckpointError, DataError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    start = time.perf_counter()
    hyps = translate_texts(ckpt.model, ckpt.tokenizer, [p.src for p in pairs])
    seconds = time.perf_counter() - start
    for pair, hyp in list(zip(pairs, hyps))[: args.show]:
        print(f"SRC {pair.src}\nREF {pair.tgt}\nOUT {hyp}\n")
    scores = bleu_chrf(hyps, [p.tgt for p in pairs])
    print(json.dumps({"tsv": args.tsv, "sentences": len(pairs), **scores, "seconds": round(seconds, 1)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
