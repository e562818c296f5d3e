"""``python -m evaluation.evaluate --suite``: a translator scored on every evaluation set there is, in one table.

Each set is scored with sacreBLEU (cased, detokenised text, the library's default 13a tokenisation for BLEU) by
greedy decoding and by beam search; the Tatoeba held-out set is scored against *all* the German translations of each
English sentence (sacreBLEU takes a variable number of references). Below the table come, for every set, how many
of its first :data:`REPEAT_CHECKED` outputs repeat a word back to back (the goal: none repeats a word even twice in a
row; a repetition loop shows up there first), the six goal sentences verbatim, and the longest run of one repeated
word in any everyday output.

Sets that are not on this machine (the corpora are not shipped; ``python -m corpora prepare all`` makes them) are
listed as missing, never silently dropped.
"""

from __future__ import annotations

import json
import time
import unicodedata
from collections import OrderedDict
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path

from corpora.extra import FLORES, FLORES_NAME, read_flores
from corpora.files import ASSETS_DATA, DataError, Pair, dataset_path, read_tsv
from corpora.parallel import EVAL_ONLY, EVERYDAY, LECTURE, PREPARED, SHARED_DATA, prepared_path, read_aligned
from decoding.batched import greedy_batch, translate_texts
from decoding.beam import beam_translate_texts
from decoding.loops import GUARD_MAX_TOKENS, LOOP_TIMES, longest_repeat
from evaluation.metrics import corpus_scores
from reading.familiarity import familiarity

#: The sentences a newcomer and a lecturer type first; the translator's goal is to get them right.
GOAL_SENTENCES = (
    "The cat sat on the mat.",
    "I am hungry.",
    "Bobby likes blackberries.",
    "The weather is nice today.",
    "My brother lives in Berlin.",
    "Thank you very much.",
)

#: Beam search as the suite scores it: width 8, GNMT length penalty α 1.0. Chosen on validation sets only, for the
#: leg-8 translator (chrF, one CPU thread): Ding valid (1,062) 38.42 at the paper's k 4, α 0.6; 38.72 (4, 1.0);
#: 38.58 (8, 0.6); 39.13 (8, 1.0); 39.21 (8, 1.4); 38.99 (12, 1.0). Mixture valid (1,600): 56.34 (4, 0.6); 56.46
#: (4, 1.0); 56.57 (8, 1.0); 56.68 (8, 1.4). α 1.0 over 1.4: chrF within 0.1 on both, BLEU higher on both (16.66 vs
#: 16.50, 36.82 vs 36.75). A width of 8 costs about twice the time of 4.
SUITE_BEAM, SUITE_ALPHA = 8, 1.0

#: The paper's newstest2014 EN→DE BLEU (Vaswani et al. 2017, Table 2): base 27.3, big 28.4.
PAPER_NEWSTEST2014 = {"base": 27.3, "big": 28.4}

#: How many outputs of each set (its first ones) the repeat check reads: enough to catch a loop, and the same number
#: for every set whatever its size.
REPEAT_CHECKED = 1000


@dataclass
class EvalSet:
    """One evaluation set: its ``name``, where it is from, the English ``sources`` and ``references[i]`` (one or
    more German translations of ``sources[i]``)."""

    name: str
    origin: str
    sources: list[str]
    references: list[list[str]]


@dataclass
class SetScore:
    """A set's scores: ``{strategy: {"bleu", "chrf"}}`` (0–100), its size, seconds spent decoding, and
    ``repeats``: ``{strategy: :func:`repeat_check`}`` of its first :data:`REPEAT_CHECKED` outputs, and
    ``reference_repeats``, the same check of their (first) references: German repeats a word now and then by right
    (", die die Arme …", "Pago Pago"), so the references say how many a perfect output would have. ``far``:
    :func:`far_scores`, whether the sentences the Translate page calls far from the training text score worse.
    ``outputs``: ``{strategy: [translation, …]}``, every output in order (``--json`` keeps them, so a loop or a
    wrong word can be looked at without translating again)."""

    name: str
    sentences: int
    references: int
    scores: dict[str, dict[str, float]] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)
    repeats: dict[str, dict[str, int]] = field(default_factory=dict)
    reference_repeats: dict[str, int] = field(default_factory=dict)
    far: dict = field(default_factory=dict)
    outputs: dict[str, list[str]] = field(default_factory=dict)


def grouped(pairs: list[Pair]) -> tuple[list[str], list[list[str]]]:
    """``pairs`` grouped by their exact English side, in order of first appearance: ``(sources, references)``."""
    refs: OrderedDict[str, list[str]] = OrderedDict()
    for p in pairs:
        refs.setdefault(p.src, []).append(p.tgt)
    return list(refs), list(refs.values())


def one_ref(name: str, origin: str, pairs: list[Pair]) -> EvalSet:
    return EvalSet(name, origin, [p.src for p in pairs], [[p.tgt] for p in pairs])


def available_sets(prepared: Path = PREPARED, shared: Path = SHARED_DATA) -> tuple[list[EvalSet], list[str]]:
    """``(sets, missing)``: every evaluation set found on this machine, and a line for each that is not.

    Shipped: Ding test, the everyday and the lecture sets. Prepared (``python -m corpora prepare all``): Multi30K
    test2016, test2017, MSCOCO 2017; BConTrasT test; Tatoeba held-out test (grouped, several references). From
    ``shared/eval``: newstest2014 and the Tatoeba-Challenge test; from ``shared/extra/eval``: FLORES-200 devtest.
    """
    sets: list[EvalSet] = []
    missing: list[str] = []
    sets.append(one_ref("ding test", "shipped: assets/data/test.tsv.gz", read_tsv(dataset_path("test", ASSETS_DATA))))
    sets.append(one_ref("everyday", "shipped: assets/eval/everyday.tsv", read_tsv(EVERYDAY)))
    sets.append(one_ref("lecture", "shipped: assets/eval/lecture.tsv", read_tsv(LECTURE)))
    for corpus, split, label in (
        ("multi30k", "test2016", "multi30k test2016"),
        ("multi30k", "test2017", "multi30k test2017"),
        ("multi30k", "mscoco2017", "multi30k mscoco2017"),
        ("bcontrast", "test", "bcontrast test"),
        ("tatoeba", "test", "tatoeba held-out"),
    ):
        path = prepared_path(corpus, split, prepared)
        if not path.is_file():
            missing.append(f"{label}: not prepared ({path}); run: python -m corpora prepare all")
            continue
        pairs = read_tsv(path)
        if corpus == "tatoeba":
            sources, refs = grouped(pairs)
            sets.append(EvalSet(label, f"prepared: {path.name}", sources, refs))
        else:
            sets.append(one_ref(label, f"prepared: {path.name}", pairs))
    for name in ("newstest2014", "tatoeba-challenge"):
        en, de = (Path(shared) / "eval" / f for f in EVAL_ONLY[name])
        if not (en.is_file() and de.is_file()):
            missing.append(f"{name}: not found ({en})")
            continue
        sets.append(one_ref(name, f"{en.parent}", read_aligned(en, de)))
    flores = read_flores(Path(shared))
    if flores is None:
        missing.append(f"{FLORES_NAME}: not found ({Path(shared).joinpath(*FLORES)})")
    else:
        sets.append(one_ref(FLORES_NAME, str(Path(shared).joinpath(*FLORES[:-1])), flores))
    return sets, missing


def repeat_check(outputs: list[str], checked: int = REPEAT_CHECKED) -> dict[str, int]:
    """``{"checked", "longest", "repeating", "looping"}`` of the first ``checked`` ``outputs``: how many were read,
    the longest run of one word back to back in any (:func:`longest_repeat`), how many repeat a word at least twice
    in a row, and how many at least three times. Two in a row is often right German (", die die Stadt …", "Pago
    Pago"), three almost never: ``looping`` counts the outputs stuck in a loop."""
    runs = [longest_repeat(o) for o in outputs[:checked]]
    return {
        "checked": len(runs),
        "longest": max(runs, default=0),
        "repeating": sum(r >= 2 for r in runs),
        "looping": sum(r >= LOOP_TIMES for r in runs),
    }


def piece_stats(tokenizer, texts: list[str]) -> dict[str, float]:
    """How well ``tokenizer`` covers ``texts``: ``{"texts", "words", "pieces", "unknown_rate", "pieces_per_word",
    "split_word_rate", "far_rate"}``. ``unknown_rate`` is the share of pieces that are ``<unk>`` (characters the
    vocabulary never saw), ``pieces_per_word`` all pieces over whitespace-separated words, ``split_word_rate`` the
    share of words (runs of letters and digits) covered by more than one piece (:func:`reading.familiarity.word_pieces`)
    and ``far_rate`` the share of texts that the Translate page calls far from what the model has seen
    (:func:`reading.familiarity.familiarity`); rates are 0–1, rounded to 4 places. Raises ``ValueError`` for no words
    at all."""
    words = split = pieces = unknown = spans = far = 0
    for text in texts:
        text = unicodedata.normalize("NFC", text)
        enc = tokenizer.encode(text)
        pieces += len(enc.ids)
        unknown += sum(i == tokenizer.unk_id for i in enc.ids)
        words += len(text.split())
        known = familiarity(tokenizer, text)
        spans += known.words
        split += known.split_count
        far += known.far
    if not words:
        raise ValueError("no words to measure the tokenizer on")
    return {
        "texts": len(texts),
        "words": words,
        "pieces": pieces,
        "unknown_rate": round(unknown / max(pieces, 1), 4),
        "pieces_per_word": round(pieces / words, 4),
        "split_word_rate": round(split / max(spans, 1), 4),
        "far_rate": round(far / max(len(texts), 1), 4),
    }


#: The sets ``--pieces`` measures the tokenizer on: the general-domain test set, news, and three in-domain ones.
PIECE_SETS = (FLORES_NAME, "newstest2014", "multi30k test2016", "tatoeba held-out", "everyday")


def pieces_table(tokenizer, sets: list[EvalSet]) -> str:
    """A Markdown table of :func:`piece_stats` for the English sources and the (first) German references of each of
    ``sets``, one row per set and side."""
    lines = [
        "| set | side | sentences | words | pieces per word | words split in pieces | unknown pieces "
        "| sentences far from the training text |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for s in sets:
        for side, texts in (("English", s.sources), ("German", [refs[0] for refs in s.references])):
            st = piece_stats(tokenizer, texts)
            lines.append(
                f"| {s.name} | {side} | {st['texts']:,} | {st['words']:,} | {st['pieces_per_word']:.2f} | "
                f"{100 * st['split_word_rate']:.1f} % | {100 * st['unknown_rate']:.2f} % | "
                f"{100 * st['far_rate']:.0f} % |"
            )
    return "\n".join(lines)


def translate(
    model,
    tokenizer,
    sources: list[str],
    strategy: str,
    beam: int = SUITE_BEAM,
    alpha: float = SUITE_ALPHA,
    loop_times: int = 0,
) -> list[str]:
    """Translations of ``sources`` by ``strategy``: ``"greedy"`` or ``"beam"`` (width ``beam``, GNMT length penalty
    ``alpha``), with the loop guard when ``loop_times`` > 0 (:func:`decoding.loops.loop_completions`). Raises
    ``SamplingError`` for a beam width outside 1–16."""
    if strategy == "beam":
        return beam_translate_texts(model, tokenizer, sources, beam, alpha, loop_times=loop_times)
    return translate_texts(model, tokenizer, sources, decode_batch=partial(greedy_batch, loop_times=loop_times))


def far_scores(tokenizer, sources: list[str], hyps: list[str], refs: list[list[str]]) -> dict:
    """``{"far": n, "far_chrf", "rest_chrf"}``: how many of ``sources`` :func:`reading.familiarity.familiarity` calls
    far from the training text, and the corpus chrF (0–100) of their outputs and of the others' (``None`` for an
    empty group): the measure of whether the Translate page's warning means a worse translation."""
    far = [familiarity(tokenizer, s).far for s in sources]
    scores = {}
    for group, name in ((True, "far_chrf"), (False, "rest_chrf")):
        picked = [i for i, f in enumerate(far) if f == group]
        scores[name] = corpus_scores([hyps[i] for i in picked], [refs[i] for i in picked])["chrf"] if picked else None
    return {"far": sum(far), **scores}


def run_suite(
    model,
    tokenizer,
    sets: list[EvalSet],
    strategies=("greedy", "beam"),
    beam: int = SUITE_BEAM,
    alpha: float = SUITE_ALPHA,
    limit: int = 0,
    progress=print,
    loop_times: int = 0,
) -> dict:
    """Score ``model`` on ``sets`` (each cut to its first ``limit`` sentences when ``limit`` > 0) with each strategy.

    Returns ``{"sets": [SetScore as dict], "goal": {sentence: {strategy: output}}, "decoding": {"beam", "alpha",
    "limit", "loop_times"}}``; each set's repeated words (:func:`repeat_check`) are in its row. ``loop_times`` > 0
    decodes with the loop guard (:func:`translate`).
    """
    results = []
    for s in sets:
        sources, refs = (s.sources[:limit], s.references[:limit]) if limit else (s.sources, s.references)
        row = SetScore(s.name, len(sources), sum(map(len, refs)), reference_repeats=repeat_check([r[0] for r in refs]))
        for strategy in strategies:
            start = time.perf_counter()
            hyps = translate(model, tokenizer, sources, strategy, beam, alpha, loop_times)
            row.seconds[strategy] = round(time.perf_counter() - start, 1)
            row.scores[strategy] = corpus_scores(hyps, refs)
            row.repeats[strategy] = repeat_check(hyps)
            row.far[strategy] = far_scores(tokenizer, sources, hyps, refs)
            row.outputs[strategy] = hyps
            progress(
                f"{s.name:<20} {strategy:<6} BLEU {row.scores[strategy]['bleu']:6.2f}  "
                f"chrF {row.scores[strategy]['chrf']:6.2f}  ({len(sources)} sentences, "
                f"{row.seconds[strategy]} s)"
            )
        results.append(asdict(row))
    goal: dict[str, dict[str, str]] = {sent: {} for sent in GOAL_SENTENCES}
    for strategy in strategies:
        outs = translate(model, tokenizer, list(GOAL_SENTENCES), strategy, beam, alpha, loop_times)
        for sent, out in zip(GOAL_SENTENCES, outs, strict=True):
            goal[sent][strategy] = out
    return {
        "sets": results,
        "goal": goal,
        "decoding": {"beam": beam, "alpha": alpha, "limit": limit, "loop_times": loop_times},
    }


def markdown(report: dict, missing: list[str]) -> str:
    """The suite's report as Markdown: the score table, the missing sets, the repeated words of each set, the
    sentences far from the training text, and the goal sentences."""
    strategies = list(report["goal"][GOAL_SENTENCES[0]])
    head = "| set | sentences | " + " | ".join(f"{s} BLEU | {s} chrF" for s in strategies) + " |"
    lines = [head, "|" + "---|" * (2 + 2 * len(strategies))]
    for row in report["sets"]:
        cells = [f"{row['scores'][s]['bleu']:.2f} | {row['scores'][s]['chrf']:.2f}" for s in strategies]
        lines.append(f"| {row['name']} | {row['sentences']:,} | " + " | ".join(cells) + " |")
    if times := report.get("decoding", {}).get("loop_times"):
        lines.append(f"\ndecoded with the loop guard: no phrase of 1–{GUARD_MAX_TOKENS} tokens {times} times in a row.")
    if any(r["name"] == "newstest2014" for r in report["sets"]):
        lines.append(
            f"\nnewstest2014: the paper reports BLEU {PAPER_NEWSTEST2014['base']} (base) and "
            f"{PAPER_NEWSTEST2014['big']} (big), trained on 4.5M WMT pairs on 8 GPUs."
        )
    for m in missing:
        lines.append(f"- missing: {m}")
    lines += [
        "",
        f"| set | outputs read (the first {REPEAT_CHECKED:,}) | "
        + " | ".join(f"{s}: outputs repeating a word (three times or more; longest run)" for s in strategies)
        + " | references repeating a word (longest run) |",
        "|" + "---|" * (3 + len(strategies)),
    ]
    for row in report["sets"]:
        checks = [row.get("repeats", {}).get(s) for s in strategies]  # a report written before the check has none
        if any(c is None for c in checks):
            continue
        ref = row.get("reference_repeats") or {}
        cells = [f"{c['repeating']} ({c.get('looping', '–')}; {c['longest']})" for c in checks]
        cells.append(f"{ref['repeating']} ({ref['longest']})" if ref else "")
        lines.append(f"| {row['name']} | {checks[0]['checked']:,} | " + " | ".join(cells) + " |")
    if any(row.get("far") for row in report["sets"]):
        lines += [
            "",
            "| set | sentences far from the training text | "
            + " | ".join(f"{s} chrF: far | {s} chrF: the others" for s in strategies)
            + " |",
            "|" + "---|" * (2 + 2 * len(strategies)),
        ]
        for row in (r for r in report["sets"] if r.get("far")):
            shares = [row["far"][s] for s in strategies]
            cells = [
                " | ".join("–" if v is None else f"{v:.2f}" for v in (f["far_chrf"], f["rest_chrf"])) for f in shares
            ]
            lines.append(
                f"| {row['name']} | {shares[0]['far']:,} of {row['sentences']:,} | " + " | ".join(cells) + " |"
            )
    clean = all(c["repeating"] == 0 for row in report["sets"] for c in row.get("repeats", {}).values())
    lines.append(
        "\nno output repeats a word twice in a row"
        if clean
        else "\nsome outputs repeat a word twice in a row (a count above 0 in the table above)"
    )
    lines.append("\n| goal sentence | " + " | ".join(strategies) + " |")
    lines.append("|" + "---|" * (1 + len(strategies)))
    for sent, outs in report["goal"].items():
        lines.append(f"| {sent} | " + " | ".join(outs[s] for s in strategies) + " |")
    return "\n".join(lines)


def main_suite(ckpt, args) -> int:
    """The ``--suite`` branch of :func:`evaluation.evaluate.main`: every set, or those named in ``--suite-sets``
    (comma-separated, as the table names them); writes ``--json`` when given. With ``--pieces``, no translation: the
    tokenizer's coverage of :data:`PIECE_SETS` (or the sets named), :func:`pieces_table`. Returns 0, or 2 with a
    message when a set cannot be read or a named set does not exist."""
    try:
        sets, missing = available_sets(Path(args.prepared), Path(args.shared))
    except DataError as exc:
        print(f"error: {exc}")
        return 2
    wanted = [n.strip() for n in (getattr(args, "suite_sets", "") or "").split(",") if n.strip()]
    missing_by_name = {m.split(":")[0]: m for m in missing}  # each line starts "name: why"
    names = [s.name for s in sets] + list(missing_by_name)
    unknown = [n for n in wanted if n not in names]
    if unknown:
        print(f"error: no evaluation set named {', '.join(map(repr, unknown))}; the sets are: {', '.join(names)}")
        return 2
    if wanted:
        sets = [s for s in sets if s.name in wanted]
        missing = [m for name, m in missing_by_name.items() if name in wanted]
    if getattr(args, "pieces", False):
        shown = set(wanted or PIECE_SETS)
        print(pieces_table(ckpt.tokenizer, [s for s in sets if s.name in shown]))
        for m in (m for name, m in missing_by_name.items() if name in shown):
            print(f"- missing: {m}")
        return 0
    strategies = ("greedy", "beam") if args.strategy_set == "both" else (args.strategy_set,)
    report = run_suite(
        ckpt.model, ckpt.tokenizer, sets, strategies, args.beam, args.alpha, args.limit, loop_times=args.loop_guard
    )
    print()
    print(markdown(report, missing))
    if args.json:
        Path(args.json).write_text(json.dumps({**report, "missing": missing}, indent=1, ensure_ascii=False) + "\n")
    return 0
