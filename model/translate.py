"""Translate from the command line: ``python -m model.translate --checkpoint DIR "text"``.

``--input FILE`` translates one sentence per line (one output line each, empty for an unusable line);
``--json`` prints tokens, ids and the attention tensor shapes instead of plain text.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from .checkpoint import CheckpointError, load_checkpoint
from .decoding import InputError, Stepper, prepare_source, translate_texts
from .trace import trace_pair

DEFAULT_CHECKPOINT = Path(__file__).resolve().parent.parent / "checkpoints" / "en-de"


def translate_json(ckpt, text: str) -> dict:
    """Tokens, ids, translation and the attention shapes ``[layers, heads, q_len, k_len]`` of one sentence."""
    cfg = ckpt.config
    src = prepare_source(ckpt.tokenizer, text, cfg.max_len, cfg.eos_id, cfg.unk_id)
    stepper = Stepper(ckpt.model, src.ids)
    stepper.run_to_end()
    trace = trace_pair(ckpt.model, ckpt.tokenizer, src.ids, stepper.tokens)
    return {
        "source": src.text,
        "translation": ckpt.tokenizer.decode(stepper.output_ids()),
        "src_tokens": src.tokens,
        "src_ids": src.ids,
        "tgt_tokens": ckpt.tokenizer.tokens(stepper.generated),
        "tgt_ids": stepper.generated,
        "token_probs": [round(r.prob, 4) for r in stepper.records],
        "attention_shapes": {k: list(v.shape) for k, v in trace.attention.items()},
        "notes": src.notes,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m model.translate", description="Translate English to German.")
    p.add_argument("text", nargs="?", help="the sentence to translate")
    p.add_argument("--checkpoint", default=str(DEFAULT_CHECKPOINT))
    p.add_argument("--input", help="file with one sentence per line ('-' for standard input)")
    p.add_argument("--json", action="store_true", help="print tokens, ids and attention shapes as JSON")
    args = p.parse_args(argv)
    if (args.text is None) == (args.input is None):
        p.error("give either a sentence or --input FILE")
    try:
        ckpt = load_checkpoint(args.checkpoint)
    except CheckpointError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.input:
        try:
            stream = sys.stdin if args.input == "-" else open(args.input, encoding="utf-8", errors="replace")
        except OSError as exc:
            print(f"error: cannot read {args.input}: {exc}", file=sys.stderr)
            return 2
        lines = [line.rstrip("\n") for line in stream]
        if args.json:
            for line in lines:
                try:
                    print(json.dumps(translate_json(ckpt, line), ensure_ascii=False))
                except InputError as exc:
                    print(json.dumps({"source": line, "error": str(exc)}, ensure_ascii=False))
        else:
            for out in translate_texts(ckpt.model, ckpt.tokenizer, lines):
                print(out)
        return 0
    try:
        result = translate_json(ckpt, args.text)
    except InputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(result, ensure_ascii=False, indent=2))
    else:
        for note in result["notes"]:
            print(f"note: {note}", file=sys.stderr)
        print(result["translation"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
