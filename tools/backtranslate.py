"""``python -m tools.backtranslate``: synthetic English → German pairs from German text (back-translation,
Sennrich et al. 2016), the training file of a mixture's ``backtranslated`` share.

A German → English model (``python -m trainer.train --reverse``, best with the English → German model's own BPE,
``--tokenizer checkpoints/en-de``) translates each sentence of a German text file, by default the Bundestag speeches
of ``../shared/data/extra/mono``. Each pair is (its English output, the German sentence): the German side is real,
the English one synthetic, and the English → German model learns to write real German from it. The English side
starts with a tag (default ``#bt``; Caswell et al. 2019, *Tagged Back-Translation*), so that the model can tell
synthetic sources from real ones and is not taught to translate their errors; an input a visitor types has no tag.
The tag is plain text cut by the model's own BPE, so it must be made of pieces the vocabulary has: ``<`` and ``>`` were
not in the 8,000-piece vocabulary (the 16,000-piece one learned with news has them), where ``<bt>`` would read as
``<unk> bt <unk>``, the piece every emoji a visitor types also becomes. A tag with an unknown piece is refused
(:func:`check_tag`).

Sources are sampled (top-k 10, Edunov et al. 2018: sampled or noised synthetic sources teach more than beam search
ones once there are many of them) or, with ``--strategy beam``, the beam's best (better when there are few). The
work is long on a CPU (≈ 6 core-hours for the 240k speeches with a 6 + 6 model), so it is done in chunks appended to
``backtranslated.partial.tsv`` beside the output and continued where it stopped when started again with the same
settings; the finished file is ``data/prepared/backtranslated.train.tsv.gz``. German sentences longer than
:data:`~corpora.extra.MAX_CHARS` characters, repeated ones, and any that is the German side of an evaluation set are
left out, and so is a pair whose English is empty, runs on, stops short or loops (:func:`clean_synthetic`; the counts
are in ``backtranslated.json``). Nothing here is shipped: the speeches are licensed CLARIN PUB+BY+NC+SA
(non-commercial), which a model trained on them must say in its card.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

from tqdm import tqdm

from corpora.extra import MAX_CHARS, Cleaned, clean_pairs, drop_reason
from corpora.files import DataError, Pair, read_text_lines, split_key, write_tsv_gz
from corpora.parallel import BACKTRANSLATED as CORPUS
from corpora.parallel import PREPARED, SHARED_DATA, evaluation_sets, prepared_path
from decoding.batched import translate_texts
from decoding.beam import beam_translate_texts
from decoding.loops import find_loop
from decoding.sampling import SamplingError, sampled_translate_texts
from model.checkpoint import CheckpointError, load_checkpoint

#: The German text back-translated by default.
MONO = SHARED_DATA / "extra" / "mono" / "de-bundestag-speeches.de.txt.gz"
#: Cut into known pieces by the shipped vocabulary (``▁ # bt``) and by one learned from the general-domain mixture
#: (``▁# bt``); a source a visitor types rarely starts with it.
TAG = "#bt"
STRATEGIES = ("sample", "beam", "greedy")
CHUNK = 512


@dataclass(frozen=True)
class Settings:
    """What a back-translation file was made with; a file is continued only with the same settings."""

    checkpoint: str
    mono: str
    strategy: str
    top_k: int
    beam: int
    tag: str
    seed: int
    limit: int


def german_sentences(path: Path, prepared: Path = PREPARED, shared: Path = SHARED_DATA, limit: int = 0) -> list[str]:
    """The German sentences of ``path`` (one per line, plain or ``.gz``) to back-translate: stripped, each once, at
    most :data:`MAX_CHARS` characters, none that is the German side of an evaluation set known here (normalised as
    the leak rule normalises, :func:`~corpora.files.split_key`); the first ``limit`` (0 = all). Raises
    ``DataError`` for a missing or unreadable file, or one without a sentence."""
    held_out = {split_key(p.tgt) for pairs in evaluation_sets(prepared, shared).values() for p in pairs}
    seen: set[str] = set()
    out: list[str] = []
    for line in read_text_lines(path):
        text = " ".join(line.split())
        key = split_key(text)
        if not text or len(text) > MAX_CHARS or key in seen or key in held_out:
            continue
        seen.add(key)
        out.append(text)
        if limit and len(out) >= limit:
            break
    if not out:
        raise DataError(f"{path}: no German sentence to back-translate")
    return out


def check_tag(tokenizer, tag: str) -> None:
    """Refuse a ``tag`` that ``tokenizer`` cuts into an unknown piece: the model would learn to read ``<unk>`` at the
    start of a source as "synthetic", and ``<unk>`` also stands for characters it has never seen in real input.

    Raises:
        DataError: naming the tag, its pieces, and a tag that works (:data:`TAG`) when that one does.
    """
    if not tag:
        return
    enc = tokenizer.encode(tag)
    if tokenizer.unk_id in enc.ids:
        works = tokenizer.unk_id not in tokenizer.encode(TAG).ids
        raise DataError(
            f"the tag {tag!r} has characters the vocabulary does not know (it reads as "
            f"{' '.join(enc.tokens)}): choose another with --tag" + (f", for example {TAG!r}" if works else "")
        )


def translate_chunk(ckpt, texts: list[str], settings: Settings, chunk_index: int) -> list[str]:
    """English for ``texts`` by ``settings.strategy``; a sampled chunk has its own seed (the seed plus the chunk's
    index), so a file continued after a stop is the file made in one go."""
    if settings.strategy == "beam":
        return beam_translate_texts(ckpt.model, ckpt.tokenizer, texts, settings.beam, 0.6)
    if settings.strategy == "greedy":
        return translate_texts(ckpt.model, ckpt.tokenizer, texts)
    return sampled_translate_texts(ckpt.model, ckpt.tokenizer, texts, settings.top_k, seed=settings.seed + chunk_index)


def backtranslate(settings: Settings, out: Path = PREPARED, progress: bool = True) -> tuple[Path, Cleaned]:
    """Back-translate ``settings.mono`` with ``settings.checkpoint`` into ``out/backtranslated.train.tsv.gz``,
    continuing ``backtranslated.partial.tsv`` when it was started with the same settings. Returns the file and
    what :func:`clean_synthetic` kept in it and dropped.

    Raises:
        DataError: the text file is missing or empty, a partial file was made with other settings (the message
            says how to start over), the checkpoint is not a German → English translator, or the tag has a piece
            its vocabulary does not know (:func:`check_tag`).
        CheckpointError: the checkpoint cannot be loaded.
    """
    ckpt = load_checkpoint(settings.checkpoint)
    if (ckpt.card or {}).get("direction") != "de-en" or not ckpt.config.is_encoder_decoder:
        raise DataError(
            f"{settings.checkpoint} is not a German → English translator (its card says no direction "
            "de-en): train one with python -m trainer.train --reverse"
        )
    check_tag(ckpt.tokenizer, settings.tag)
    sentences = german_sentences(Path(settings.mono), out, limit=settings.limit)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    partial, meta = out / f"{CORPUS}.partial.tsv", out / f"{CORPUS}.json"
    done = 0
    if partial.is_file():
        before = json.loads(meta.read_text(encoding="utf-8")) if meta.is_file() else None
        if before != asdict(settings):
            raise DataError(f"{partial} was made with other settings ({meta}); delete both to start over")
        done = _whole_chunks(partial, len(sentences))
    else:
        meta.write_text(json.dumps(asdict(settings), indent=1) + "\n", encoding="utf-8")
    with (
        partial.open("a", encoding="utf-8") as f,
        tqdm(total=len(sentences), initial=done, unit="sentence", disable=not progress) as bar,
    ):
        for start in range(done, len(sentences), CHUNK):  # whole chunks: a chunk's seed is its index
            german = sentences[start : start + CHUNK]
            english = translate_chunk(ckpt, german, settings, start // CHUNK)
            f.writelines(
                f"{' '.join(f'{settings.tag} {en}'.split())}\t{de}\n" for en, de in zip(english, german, strict=True)
            )
            f.flush()
            bar.update(len(german))
    pairs = [Pair(*line.rstrip("\n").split("\t")) for line in partial.open(encoding="utf-8")]
    cleaned = clean_synthetic(pairs, settings.tag)
    final = prepared_path(CORPUS, "train", out)
    write_tsv_gz(final, cleaned.pairs)
    meta.write_text(
        json.dumps({**asdict(settings), "translated": len(pairs), "dropped": cleaned.dropped}, indent=1) + "\n",
        encoding="utf-8",
    )
    partial.unlink()
    return final, cleaned


def clean_synthetic(pairs: list[Pair], tag: str) -> Cleaned:
    """The synthetic ``pairs`` worth training on, order kept, and ``dropped`` = ``{reason: pairs}``: an empty
    English side; the general-domain files' cleaning (:func:`corpora.extra.drop_reason`: a side over 400
    characters, or one side over twice the other's length, the mark of a truncated or runaway output); or English
    stuck in a loop (:func:`decoding.loops.find_loop`). A weak German → English model writes all three, and a pair
    whose English says less than its German teaches the English → German model to invent words."""

    def why(pair: Pair) -> str | None:
        english = pair.src[len(tag) :].strip() if tag and pair.src.startswith(tag) else pair.src.strip()
        if not english:
            return "empty"
        return drop_reason(Pair(english, pair.tgt)) or ("looping" if find_loop(english) else None)

    return clean_pairs(pairs, why)


def _whole_chunks(partial: Path, total: int) -> int:
    """Cut ``partial`` back to its whole chunks (a stop may have left a chunk half written) and return how many
    sentences it holds: a multiple of :data:`CHUNK`, or ``total`` when it is complete."""
    lines = [line for line in partial.open(encoding="utf-8") if line.endswith("\n")]
    keep = len(lines) if len(lines) >= total else len(lines) - len(lines) % CHUNK
    partial.write_text("".join(lines[:keep]), encoding="utf-8")
    return keep


def main(argv: list[str] | None = None) -> int:
    """Parse ``argv`` and back-translate; prints the file written. Returns 2 with a message for bad input."""
    parser = argparse.ArgumentParser(prog="python -m tools.backtranslate", description=__doc__.split("\n")[0])
    parser.add_argument("--checkpoint", required=True, help="a German → English model (trained with --reverse)")
    parser.add_argument("--mono", default=str(MONO), help="German text, one sentence per line (plain or .gz)")
    parser.add_argument(
        "--strategy",
        choices=STRATEGIES,
        default="sample",
        help="sample (top-k), beam (its best) or greedy English sources",
    )
    parser.add_argument("--top-k", type=int, default=10, help="with --strategy sample: the tokens sampled from")
    parser.add_argument("--beam", type=int, default=4, help="with --strategy beam: the beam width")
    parser.add_argument("--tag", default=TAG, help="written before every synthetic English side ('' for none)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--limit", type=int, default=0, help="back-translate only the first N sentences (0 = all)")
    parser.add_argument("--out", type=Path, default=PREPARED, help="folder of the prepared corpora")
    parser.add_argument("--no-progress", action="store_true")
    args = parser.parse_args(argv)
    settings = Settings(
        str(args.checkpoint), str(args.mono), args.strategy, args.top_k, args.beam, args.tag, args.seed, args.limit
    )
    try:
        path, cleaned = backtranslate(settings, args.out, progress=not args.no_progress)
    except (DataError, CheckpointError, SamplingError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    why = ", ".join(f"{reason} {n:,}" for reason, n in cleaned.dropped.items())
    print(
        f"wrote {path}: {len(cleaned.pairs):,} synthetic pairs"
        + (f" (dropped: {why})" if why else "")
        + f"; train on them with --mix …,{CORPUS}=1"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
