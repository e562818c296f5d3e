"""Score a checkpoint on a TSV: ``python -m model.evaluate --checkpoint DIR [--tsv FILE] [--limit N]``.

Prints corpus BLEU and chrF (sacreBLEU) of greedy translations against the file's second column. The
default file is the shipped Ding test split.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from .checkpoint import CheckpointError, load_checkpoint
from .data import DataError, dataset_path, read_tsv
from .decoding import translate_texts
from .metrics import bleu_chrf
from .translate import DEFAULT_CHECKPOINT


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m model.evaluate", description=__doc__.split("\n")[0])
    p.add_argument("--checkpoint", default=str(DEFAULT_CHECKPOINT))
    p.add_argument("--tsv", default=str(dataset_path("test")))
    p.add_argument("--limit", type=int, default=0, help="score only the first N pairs")
    p.add_argument("--show", type=int, default=0, help="print the first N source / reference / output triples")
    args = p.parse_args(argv)
    try:
        ckpt = load_checkpoint(args.checkpoint)
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
