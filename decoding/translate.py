"""Translate from the command line: ``python -m decoding.translate --checkpoint DIR "text"``.

``--input FILE`` translates one sentence per line (one output line each, empty for an unusable line), greedy or
beam search in batches; ``--json`` prints tokens, ids and the attention tensor shapes instead of plain text.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Sequence

from decoding.batched import translate_texts
from decoding.beam import beam_search, beam_translate_texts, check_beam_size
from decoding.sampling import Chooser, SamplingConfig, SamplingError
from decoding.stepping import InputError, Stepper, input_limit, prepare_source, strip_eos
from model.checkpoint import CheckpointError, load_checkpoint
from model.config import decoder_prefix
from model.hf.generation import decoding_cap, forced_eos

DEFAULT_CHECKPOINT = Path(__file__).resolve().parent.parent / "checkpoints" / "en-de"


def output_key(cfg) -> str:
    """``"translation"`` for a translator, ``"continuation"`` for a decoder-only language model."""
    return "translation" if cfg.is_encoder_decoder else "continuation"


def attention_shapes(cfg, src_len: int, tgt_len: int) -> dict[str, list[int]]:
    """kind → ``[layers, heads, q_len, k_len]`` of a traced pass over ``src_len`` source and ``tgt_len`` decoder
    positions (rows = queries, columns = keys; a decoder-only model's one kind ``self`` covers its decoder inputs)."""
    keys = {
        "encoder": (src_len, src_len),
        "decoder": (tgt_len, tgt_len),
        "cross": (tgt_len, src_len),
        "self": (tgt_len, tgt_len),
    }
    return {kind: [n, cfg.n_heads, *keys[kind]] for kind, n in cfg.attention_layers().items()}


def translate_json(
    ckpt, text: str, sampling: SamplingConfig | None = None, beam_size: int = 0, length_penalty: float = 0.6
) -> dict:
    """Tokens, ids, translation and the attention shapes ``[layers, heads, q_len, k_len]`` of one sentence.

    ``sampling`` picks each token (default greedy); ``beam_size > 0`` runs beam search instead. A decoder-only
    checkpoint continues ``text`` as a prompt: the result holds ``continuation`` instead of ``translation``
    (:func:`output_key`), and ``tgt_tokens`` / ``tgt_ids`` are the generated tokens after the prompt.

    Raises:
        InputError: the text is unusable; SamplingError: a parameter is out of range.
    """
    cfg = ckpt.config
    src = prepare_source(ckpt.tokenizer, text, input_limit(cfg), cfg.eos_id, cfg.unk_id)
    limit = decoding_cap(cfg, src.ids, ckpt.generation)  # a Hugging Face folder's own cap, else ours
    key = output_key(cfg)
    prefix = decoder_prefix(cfg, src.ids, None)
    extra = {}
    if beam_size:
        result = beam_search(ckpt.model, src.ids, beam_size, length_penalty, max_new_tokens=limit)
        best = result.hypotheses[0]
        generated: Sequence[int] = best.tokens
        extra["beam"] = [
            {
                key: ckpt.tokenizer.decode(h.tokens),
                "log_prob": round(h.log_prob, 4),
                "score": round(h.score, 4),
                "finished": h.finished,
            }
            for h in result.hypotheses
        ]
        probs = None
    else:
        stepper = Stepper(ckpt.model, src.ids, max_new_tokens=limit, forced_eos_id=forced_eos(ckpt.generation))
        stepper.run_to_end(Chooser((sampling or SamplingConfig()).validate(cfg.vocab_size)))
        generated = stepper.generated
        probs = [round(r.prob, 4) for r in stepper.records]
    output = strip_eos(generated, cfg.eos_id)
    tgt_len = len(prefix) + len(output)
    return {
        "source": src.text,
        key: ckpt.tokenizer.decode(output),
        "src_tokens": src.tokens,
        "src_ids": src.ids,
        "tgt_tokens": ckpt.tokenizer.tokens(generated),
        "tgt_ids": generated,
        "token_probs": probs,
        "attention_shapes": attention_shapes(cfg, len(src.ids), tgt_len),
        "notes": src.notes,
        **extra,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m decoding.translate", description="Translate English to German.")
    p.add_argument("text", nargs="?", help="the sentence to translate")
    p.add_argument("--checkpoint", default=str(DEFAULT_CHECKPOINT))
    p.add_argument("--input", help="file with one sentence per line ('-' for standard input)")
    p.add_argument("--json", action="store_true", help="print tokens, ids and attention shapes as JSON")
    p.add_argument("--strategy", choices=["greedy", "sample", "beam"], default="greedy")
    p.add_argument("--temperature", type=float, default=1.0)
    p.add_argument("--top-k", type=int, default=0, help="0 = no top-k cut")
    p.add_argument("--top-p", type=float, default=1.0, help="1 = no nucleus cut")
    p.add_argument("--beam-size", "--beam", type=int, default=4)
    p.add_argument("--length-penalty", "--alpha", type=float, default=0.6, help="GNMT alpha")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    sampling = SamplingConfig(
        "sample" if args.strategy == "sample" else "greedy", args.temperature, args.top_k, args.top_p, args.seed
    )
    beam = args.beam_size if args.strategy == "beam" else 0
    try:
        sampling.validate()
        if args.strategy == "beam":
            check_beam_size(beam)
    except SamplingError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
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
        if args.json or args.strategy == "sample" or not ckpt.config.is_encoder_decoder:
            for line in lines:
                try:
                    result = translate_json(ckpt, line, sampling, beam, args.length_penalty)
                    print(json.dumps(result, ensure_ascii=False) if args.json else result[output_key(ckpt.config)])
                except (InputError, SamplingError) as exc:
                    print(json.dumps({"source": line, "error": str(exc)}, ensure_ascii=False) if args.json else "")
        elif beam:
            for out in beam_translate_texts(ckpt.model, ckpt.tokenizer, lines, beam, args.length_penalty):
                print(out)
        else:
            for out in translate_texts(ckpt.model, ckpt.tokenizer, lines):
                print(out)
        return 0
    try:
        result = translate_json(ckpt, args.text, sampling, beam, args.length_penalty)
    except (InputError, SamplingError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(result, ensure_ascii=False, indent=2))
    else:
        for note in result["notes"]:
            print(f"note: {note}", file=sys.stderr)
        print(result[output_key(ckpt.config)])
    return 0


if __name__ == "__main__":
    sys.exit(main())
