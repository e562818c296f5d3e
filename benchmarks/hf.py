"""A Hugging Face opus-mt-sized translator on this machine, next to the shipped one: ``python -m benchmarks.hf``.

Nothing is downloaded. The benchmark builds a folder shaped exactly like ``Helsinki-NLP/opus-mt-en-de`` (MarianMT:
d_model 512, 8 heads, 6 + 6 layers, d_ff 2048, 58,101 pieces, about 74M parameters) with *random* weights, saved by
``transformers`` (a development requirement: ``pip install -r requirements-dev.txt``), and a tiny SentencePiece
tokenizer padded to the full vocabulary. Speed does not depend on what the weights have learned, so the numbers are
those a user who downloads the real model will see, except that random weights never emit ``<eos>``: every decode
here is forced to the same length for both models.

It prints one table, both models measured in the same run (compare the ratio column across machines, not the
milliseconds): loading the folder, one KV-cached decode step, a 32-token translation with and without the cache,
the traced forward the Attention page draws, the head-ablation sweep, and the Translate page's first and warm render
in Streamlit's AppTest.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from benchmarks.decode import never_eos, time_generation
from benchmarks.table import print_table
from decoding.stepping import Stepper, prepare_source
from decoding.translate import DEFAULT_CHECKPOINT
from model.checkpoint import Checkpoint, load_checkpoint
from reading.analysis import ablation_sweep
from reading.trace import trace_pair

ROOT = Path(__file__).resolve().parent.parent
SENTENCE = "The animal didn't cross the street because it was too tired."
#: ``Helsinki-NLP/opus-mt-en-de``'s config.json, the sizes and ids that matter for speed.
OPUS_MT_EN_DE: dict[str, Any] = dict(
    vocab_size=58101,
    d_model=512,
    encoder_layers=6,
    decoder_layers=6,
    encoder_attention_heads=8,
    decoder_attention_heads=8,
    encoder_ffn_dim=2048,
    decoder_ffn_dim=2048,
    max_position_embeddings=512,
    activation_function="swish",
    scale_embedding=True,
    pad_token_id=58100,
    eos_token_id=0,
    decoder_start_token_id=58100,
    forced_eos_token_id=0,
)
#: ``--shape``: the real size, or a tiny one that checks the benchmark itself in seconds (the test suite's).
#: name → (the MarianConfig's sizes and ids, the SentencePiece vocabulary, the Ding pairs it is learned from).
SHAPES: dict[str, tuple[dict[str, Any], int, int | None]] = {
    "opus-mt-en-de": (OPUS_MT_EN_DE, 8000, None),
    "tiny": (
        {
            **OPUS_MT_EN_DE,
            "vocab_size": 3001,
            "d_model": 32,
            "encoder_layers": 2,
            "decoder_layers": 2,
            "encoder_attention_heads": 4,
            "decoder_attention_heads": 4,
            "encoder_ffn_dim": 64,
            "decoder_ffn_dim": 64,
            "pad_token_id": 3000,
            "decoder_start_token_id": 3000,
        },
        500,
        2000,
    ),
}


def _train_unigram(lines: list[str], vocab_size: int) -> bytes:
    """A SentencePiece unigram model (Kudo 2018) as Marian's: ``</s>`` = 0, ``<unk>`` = 1, no ``<s>``."""
    import io

    import sentencepiece as spm

    out = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(lines),
        model_writer=out,
        model_type="unigram",
        vocab_size=vocab_size,
        character_coverage=1.0,
        eos_id=0,
        unk_id=1,
        bos_id=-1,
        pad_id=-1,
        num_threads=1,
        minloglevel=2,
    )
    return out.getvalue()


def write_opus_mt_sized(folder: Path, shape: str = "opus-mt-en-de") -> Path:
    """Write a random-weight MarianMT folder of the ``shape`` in :data:`SHAPES` into ``folder`` (``config.json``,
    ``model.safetensors``, ``source.spm``, ``target.spm``, ``vocab.json``) and return it.

    The two SentencePiece models are learned from the shipped Ding sentences (English, German), so that a sentence
    splits into about as many pieces as with a real opus-mt tokenizer; ``vocab.json`` holds their pieces, filled up to
    the model's vocabulary size (58,101 for the real shape), ``<pad>`` last. Raises ``ImportError`` without
    ``transformers``."""
    import sentencepiece as spm
    from transformers import MarianConfig, MarianMTModel

    from corpora.files import dataset_path, read_tsv

    config, spm_vocab, n_pairs = SHAPES[shape]
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    pairs = read_tsv(dataset_path("train"))[:n_pairs]
    vocab = {"</s>": 0, "<unk>": 1}
    for name, lines in (("source.spm", [p.src for p in pairs]), ("target.spm", [p.tgt for p in pairs])):
        blob = _train_unigram(lines, spm_vocab)
        (folder / name).write_bytes(blob)
        sp = spm.SentencePieceProcessor(model_proto=blob)
        for i in range(sp.get_piece_size()):
            if not (sp.is_control(i) or sp.is_unknown(i)):
                vocab.setdefault(sp.id_to_piece(i), len(vocab))
    while len(vocab) < config["vocab_size"] - 1:
        vocab[f"<filler{len(vocab)}>"] = len(vocab)
    vocab["<pad>"] = len(vocab)
    (folder / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False), encoding="utf-8")
    (folder / "tokenizer_config.json").write_text(
        json.dumps({"source_lang": "en", "target_lang": "de"}), encoding="utf-8"
    )
    torch.manual_seed(0)
    MarianMTModel(MarianConfig(**config)).save_pretrained(folder, safe_serialization=True)
    saved = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    saved.update({"_name_or_path": f"random weights, {shape}'s shape", "bad_words_ids": [[config["pad_token_id"]]]})
    (folder / "config.json").write_text(json.dumps(saved, indent=2), encoding="utf-8")
    return folder


def _median_seconds(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def measure_model(folder: Path, repeats: int, tokens: int) -> dict:
    """Load, decode, trace and sweep one checkpoint folder; seconds (medians of ``repeats``) and sizes."""
    load_s = _median_seconds(lambda: load_checkpoint(folder), max(1, repeats // 2))
    ckpt: Checkpoint = load_checkpoint(folder)
    cfg = ckpt.config
    src = prepare_source(ckpt.tokenizer, SENTENCE, cfg.max_len, cfg.eos_id, cfg.unk_id)
    time_generation(ckpt.model, src.ids, 4, True, 1)  # warm-up
    cached = statistics.median(time_generation(ckpt.model, src.ids, tokens, True, repeats))
    full = statistics.median(time_generation(ckpt.model, src.ids, tokens, False, repeats))
    stepper = Stepper(ckpt.model, src.ids, max_new_tokens=15)
    stepper.run_to_end(never_eos(cfg.eos_id))
    tgt = stepper.tokens
    trace_s = _median_seconds(lambda: trace_pair(ckpt.model, ckpt.tokenizer, src.ids, tgt), repeats)
    sweep_s = _median_seconds(lambda: ablation_sweep(ckpt.model, src.ids, tgt), 1)
    heads = sum(n for n in cfg.attention_layers().values()) * cfg.n_heads
    return {
        "parameters": ckpt.model.num_parameters(),
        "load": load_s,
        "step": cached / tokens,
        "cached": cached,
        "full": full,
        "trace": trace_s,
        "sweep": sweep_s,
        "heads": heads,
        "src": len(src.ids),
        "tgt": len(tgt),
        "bytes": sum(f.stat().st_size for f in Path(folder).iterdir() if f.is_file()),
    }


def page_times(root: Path, name: str, repeats: int) -> tuple[float, float]:
    """``(first render, median warm rerun)`` seconds of the Translate page on checkpoint ``name`` under ``root``
    (found through ``$ATTENTION_EXPLORER_CHECKPOINTS``); the first render loads the model."""
    from streamlit.testing.v1 import AppTest

    from ui import checkpoints

    os.environ[checkpoints.CHECKPOINTS_ENV] = str(root)
    checkpoints._load.clear()
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=600)
    at.query_params["ckpt"] = name
    at.query_params["text"] = SENTENCE
    start = time.perf_counter()
    at.run()
    first = time.perf_counter() - start
    if at.exception:
        raise RuntimeError(at.exception[0].message)
    return first, _median_seconds(at.run, repeats)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.hf", description=__doc__.split("\n")[0])
    p.add_argument("--checkpoint", default=str(DEFAULT_CHECKPOINT), help="our model to compare with")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--tokens", type=int, default=32, help="forced output length of the decode timings")
    p.add_argument("--threads", type=int, default=0, help="torch threads (0 = torch's default)")
    p.add_argument("--no-page", action="store_true", help="skip the AppTest page timings")
    p.add_argument(
        "--shape",
        choices=list(SHAPES),
        default="opus-mt-en-de",
        help="the Hugging Face model's size (tiny: a check of the benchmark itself)",
    )
    args = p.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as tmp:
        big_root = Path(tmp)
        big = write_opus_mt_sized(big_root / f"{args.shape}-sized", args.shape)
        ours = measure_model(Path(args.checkpoint), args.repeats, args.tokens)
        theirs = measure_model(big, args.repeats, args.tokens)
        if not args.no_page:
            ours["page"] = page_times(Path(args.checkpoint).parent, Path(args.checkpoint).name, args.repeats)
            theirs["page"] = page_times(big_root, big.name, args.repeats)

    def row(label: str, a: float, b: float, unit: str, scale: float = 1.0, digits: int = 1):
        return (label, f"{a * scale:,.{digits}f} {unit}", f"{b * scale:,.{digits}f} {unit}", f"{b / a:.1f}×")

    rows = [
        (
            "parameters",
            f"{ours['parameters'] / 1e6:.1f}M",
            f"{theirs['parameters'] / 1e6:.1f}M",
            f"{theirs['parameters'] / ours['parameters']:.1f}×",
        ),
        row("folder on disk", ours["bytes"], theirs["bytes"], "MB", 1e-6),
        row("load the folder (load_checkpoint)", ours["load"], theirs["load"], "s", digits=2),
        row("one KV-cached decode step", ours["step"], theirs["step"], "ms", 1e3),
        row(f"{args.tokens} tokens with the KV cache", ours["cached"], theirs["cached"], "ms", 1e3, 0),
        row(f"{args.tokens} tokens, full recompute", ours["full"], theirs["full"], "ms", 1e3, 0),
        row("traced forward (every attention weight)", ours["trace"], theirs["trace"], "ms", 1e3, 0),
        (
            f"head-ablation sweep ({ours['heads']} / {theirs['heads']} heads)",
            f"{ours['sweep']:.2f} s",
            f"{theirs['sweep']:.2f} s",
            f"{theirs['sweep'] / ours['sweep']:.1f}×",
        ),
    ]
    if not args.no_page:
        rows += [
            row("Translate page, first render (loads the model)", ours["page"][0], theirs["page"][0], "s", digits=2),
            row("Translate page, warm rerun (median)", ours["page"][1], theirs["page"][1], "s", digits=2),
        ]
    print(f"sentence: {SENTENCE!r} ({ours['src']} / {theirs['src']} source tokens); threads: {torch.get_num_threads()}")
    print_table(rows, header=("measure", Path(args.checkpoint).name, f"{args.shape}-sized (random)", "ratio"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
