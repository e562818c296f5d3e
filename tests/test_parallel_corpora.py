"""corpora.parallel: Tatoeba, Multi30K and BConTrasT read as distributed, split, cleaned of every evaluation
sentence, and mixed; and evaluation.suite's scoring with several references. Small fixtures written here, in the
corpora's own formats: nothing from ../shared is needed."""

from __future__ import annotations

import gzip
import zipfile
from pathlib import Path

import pytest

from corpora import __main__ as cli
from corpora.files import DataError, Pair, bucket_of, read_tsv, split_key
from corpora.mixture import prepare_mixture
from corpora.parallel import (
    TATOEBA_TEST,
    TATOEBA_VALID,
    evaluation_keys,
    evaluation_sets,
    interleave,
    prepare_corpora,
    prepare_corpus,
    prepared_path,
    read_bcontrast,
    read_multi30k,
    read_tatoeba,
    split_tatoeba,
)
from evaluation.metrics import corpus_scores
from evaluation.suite import grouped, longest_repeat

ATTRIBUTION = "CC-BY 2.0 (France) Attribution: tatoeba.org #1 (CK) & #2 (Pfirsichbaeumchen)"


def english_in(bucket_range: range, start: int = 0) -> str:
    """An English sentence whose hash bucket is in ``bucket_range`` (the Tatoeba split is by that bucket)."""
    n = start
    while bucket_of(f"Sentence number {n}.") not in bucket_range:
        n += 1
    return f"Sentence number {n}."


def write_lines(path: Path, lines: list[str]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(path, "wt", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")


@pytest.fixture
def sources(tmp_path):
    """A Tatoeba zip (with the attribution column), a Multi30K raw folder and a BConTrasT folder, with known
    overlaps: 'Good morning, everyone.' is in the shipped everyday set, 'Two dogs play.' is in Multi30K's test."""
    held_out = english_in(TATOEBA_TEST)
    lines = [
        "I am hungry.\tIch habe Hunger.\t" + ATTRIBUTION,
        "I am hungry.\tIch bin hungrig.\t" + ATTRIBUTION,
        "Good morning, everyone.\tGuten Morgen, alle zusammen.\t" + ATTRIBUTION,
        "Two dogs play!\tZwei Hunde spielen!\t" + ATTRIBUTION,
        f"{held_out}\tSatz A.\t{ATTRIBUTION}",
        f"{held_out}\tSatz B.\t{ATTRIBUTION}",
        "We walk home.\tWir gehen nach Hause.",
    ]  # the 2018 export has no third column
    zpath = tmp_path / "src" / "deu-eng.zip"
    zpath.parent.mkdir(parents=True)
    with zipfile.ZipFile(zpath, "w") as z:
        z.writestr("_about.txt", "about")
        z.writestr("deu.txt", "\n".join(lines) + "\n")
    m30k = tmp_path / "src" / "multi30k"
    splits = {
        "train": (["A man rides a horse.", "Two dogs play!"], ["Ein Mann reitet.", "Zwei Hunde spielen!"]),
        "val": (["A girl sings."], ["Ein Mädchen singt."]),
        "test_2016_flickr": (["Two dogs play."], ["Zwei Hunde spielen."]),
        "test_2017_flickr": (["A cat sleeps."], ["Eine Katze schläft."]),
        "test_2017_mscoco": (["A bus drives."], ["Ein Bus fährt."]),
        "test_2018_flickr": (["A boy runs."], ["Ein Junge rennt."]),
    }
    for stem, (en, de) in splits.items():
        write_lines(m30k / f"{stem}.en.gz", en)
        write_lines(m30k / f"{stem}.de.gz", de)
    bc = tmp_path / "src" / "bcontrast"
    write_lines(
        bc / "train.en-de.tsv.gz",
        ["Hi, how can I help you?\tHallo, wie kann ich helfen?", "I want a pizza.\tIch möchte eine Pizza."],
    )
    write_lines(bc / "dev.en-de.tsv.gz", ["Thanks.\tDanke."])
    write_lines(bc / "test.en-de.tsv.gz", ["I want a pizza.\tIch will eine Pizza."])
    return {
        "tatoeba": zpath,
        "multi30k": m30k,
        "bcontrast": bc,
        "held_out": held_out,
        "out": tmp_path / "prepared",
        "shared": tmp_path / "no-shared",
    }


def test_tatoeba_reads_the_zip_with_or_without_the_attribution_column(sources, tmp_path):
    pairs = read_tatoeba(sources["tatoeba"])
    assert Pair("I am hungry.", "Ich habe Hunger.") in pairs and Pair("We walk home.", "Wir gehen nach Hause.") in pairs
    assert all("CC-BY" not in p.tgt for p in pairs)
    txt = tmp_path / "deu.txt"
    txt.write_text("Hi.\tHallo.\n\nRun!\tLauf!\tCC-BY 2.0\n", encoding="utf-8")
    assert read_tatoeba(txt) == [Pair("Hi.", "Hallo."), Pair("Run!", "Lauf!")]


@pytest.mark.parametrize(
    "content,match", [(None, "No Tatoeba export"), ("no tab here\n", "expected 'English<TAB>"), ("\n\n", "holds no")]
)
def test_bad_tatoeba_files_get_a_clear_error(tmp_path, content, match):
    path = tmp_path / "deu.txt"
    if content is not None:
        path.write_text(content, encoding="utf-8")
    with pytest.raises(DataError, match=match):
        read_tatoeba(path)


def test_a_zip_without_deu_txt_and_misaligned_multi30k_are_refused(tmp_path, sources):
    bad = tmp_path / "bad.zip"
    with zipfile.ZipFile(bad, "w") as z:
        z.writestr("_about.txt", "x")
    with pytest.raises(DataError, match="no deu.txt"):
        read_tatoeba(bad)
    write_lines(sources["multi30k"] / "val.de.gz", ["eins", "zwei"])
    with pytest.raises(DataError, match="line-aligned"):
        read_multi30k(sources["multi30k"], "valid")
    with pytest.raises(DataError, match="No Multi30K folder"):
        read_multi30k(tmp_path / "nowhere", "train")
    with pytest.raises(DataError, match="No BConTrasT"):
        read_bcontrast(tmp_path / "nowhere")


def test_tatoeba_splits_by_english_sentence_so_all_translations_stay_together(sources):
    splits = split_tatoeba(read_tatoeba(sources["tatoeba"]))
    test = [p for p in splits["test"] if p.src == sources["held_out"]]
    assert [p.tgt for p in test] == ["Satz A.", "Satz B."]
    assert not any(p.src == sources["held_out"] for p in splits["train"] + splits["valid"])
    assert {split_key(p.src) for p in splits["valid"]}.isdisjoint({split_key(p.src) for p in splits["train"]})
    assert TATOEBA_VALID != TATOEBA_TEST


def test_no_evaluation_sentence_reaches_any_training_file(sources):
    out, shared = sources["out"], sources["shared"]
    prepare_corpora({c: sources[c] for c in ("tatoeba", "multi30k", "bcontrast")}, out, shared)
    counts = prepare_mixture({"tatoeba": 1, "multi30k": 2, "bcontrast": 1, "ding": 0}, out, shared)
    keys = evaluation_keys(evaluation_sets(out, shared))
    # The shipped everyday sentence, Multi30K's test sentence (by normalised English: '!' vs '.') and BConTrasT's
    # test sentence were in the training sources; none survives in any training file.
    for name in ("tatoeba.train", "multi30k.train", "bcontrast.train", "mixture.train"):
        train = read_tsv(out / f"{name}.tsv.gz")
        assert not {split_key(p.src) for p in train} & keys, name
    mixture = read_tsv(prepared_path("mixture", "train", out))
    assert Pair("Good morning, everyone.", "Guten Morgen, alle zusammen.") not in mixture
    assert not any(p.src.startswith(("Two dogs", "I want a pizza")) for p in mixture)
    assert sum(p.src == "A man rides a horse." for p in mixture) == 2  # multi30k repeated twice
    assert counts["multi30k"] == 2 and counts["train"] == len(mixture)
    valid = read_tsv(prepared_path("mixture", "valid", out))
    assert {p.src for p in valid} >= {"A girl sings.", "Thanks."}


def test_a_later_prepared_corpus_removes_its_test_sentences_from_the_mixture(sources):
    """Tatoeba prepared first cannot know BConTrasT's test set; the mixture re-checks against every set known."""
    out, shared = sources["out"], sources["shared"]
    extra = sources["tatoeba"].parent / "deu.txt"
    extra.write_text("I want a pizza.\tIch möchte eine Pizza.\n", encoding="utf-8")
    prepare_corpus("tatoeba", extra, out, shared)
    assert read_tsv(prepared_path("tatoeba", "train", out))[0].src == "I want a pizza."
    prepare_corpus("bcontrast", sources["bcontrast"], out, shared)
    prepare_mixture({"tatoeba": 1, "bcontrast": 1, "ding": 0}, out, shared)
    assert not any(p.src == "I want a pizza." for p in read_tsv(prepared_path("mixture", "train", out)))


def test_the_cli_prepares_and_reports_errors_without_a_traceback(sources, capsys):
    out = sources["out"]
    assert cli.main(["prepare", "multi30k", "--source", str(sources["multi30k"]), "--out", str(out)]) == 0
    assert "multi30k: train 1, valid 1" in capsys.readouterr().out  # "Two dogs play!" is a test sentence
    # a mixture written elsewhere (to carry to a lent machine) leaves the prepared folder's own mixture alone
    assert (
        cli.main(["prepare", "mixture", "--repeat", "multi30k=3,ding=0", "--out", str(out), "--to", str(out / "gpu")])
        == 0
    )
    assert f"-> {out / 'gpu'}/mixture" in capsys.readouterr().out
    assert len(read_tsv(prepared_path("mixture", "train", out / "gpu"))) == 3
    assert not prepared_path("mixture", "train", out).exists()
    assert cli.main(["prepare", "tatoeba", "--source", str(out / "missing.zip"), "--out", str(out)]) == 2
    assert "error: No Tatoeba export" in capsys.readouterr().err
    assert cli.main(["prepare", "mixture", "--repeat", "multi30k=x", "--out", str(out)]) == 2
    assert "corpus=N" in capsys.readouterr().err
    assert cli.main(["prepare", "mixture", "--repeat", "europarl=1", "--out", str(out)]) == 2
    assert "unknown corpus" in capsys.readouterr().err
    assert cli.main(["prepare", "mixture", "--out", str(out / "empty")]) == 2
    assert "nothing prepared" in capsys.readouterr().err


def test_interleave_puts_every_source_in_the_first_rows():
    a, b = [Pair(f"a{i}", "x") for i in range(3)], [Pair("b0", "y")]
    assert [p.src for p in interleave([a, b])] == ["a0", "b0", "a1", "a2"]


# --- evaluation.suite ------------------------------------------------------------------------------------------
def test_several_references_are_scored_together():
    sources, refs = grouped(
        [Pair("I am hungry.", "Ich habe Hunger."), Pair("Go.", "Geh."), Pair("I am hungry.", "Ich bin hungrig.")]
    )
    assert sources == ["I am hungry.", "Go."] and refs == [["Ich habe Hunger.", "Ich bin hungrig."], ["Geh."]]
    # The second reference is the one the output matches: with both it scores 100, with only the first it does not.
    both = corpus_scores(["Ich bin hungrig.", "Geh."], refs)
    first_only = corpus_scores(["Ich bin hungrig.", "Geh."], [["Ich habe Hunger."], ["Geh."]])
    assert both["bleu"] == pytest.approx(100.0) and first_only["bleu"] < both["bleu"]
    with pytest.raises(ValueError):
        corpus_scores([], [])


@pytest.mark.parametrize(
    "text,run",
    [
        ("", 0),
        ("Das ist gut.", 1),
        ("Gebäude Gebäude Gebäude Gebäude.", 4),
        ("ja, ja, ja nein", 3),
        ("Die die Katze", 1),
    ],
)
def test_longest_repeat_counts_one_word_back_to_back(text, run):
    assert longest_repeat(text) == run


def test_the_real_pairs_preset_trains_on_the_mixture_with_its_shares(sources, monkeypatch):
    """The Training page's preset becomes ``--mix`` with the corpus shares; the form refuses it, naming the command,
    until the corpora are prepared; the trainer then mixes them in memory, each corpus repeated by its share."""
    from corpora import parallel
    from launching.form import PRESETS, build_command, preset_form, validate_form
    from trainer.options import build_parser, check_args
    from training.data import load_data

    out, shared = sources["out"], sources["shared"]
    monkeypatch.setattr(parallel, "PREPARED", out)
    monkeypatch.setattr(parallel, "SHARED_DATA", shared)
    name = next(n for n in PRESETS if n.startswith("real sentence pairs"))
    form = preset_form(name)
    assert any("python -m corpora prepare all" in e for e in validate_form(form))
    prepare_corpora({c: sources[c] for c in ("tatoeba", "multi30k", "bcontrast")}, out, shared)
    assert validate_form(form) == []
    assert validate_form({**form, "mix": "tatoeba=0,multi30k=0,bcontrast=0,ding=0"}) != []
    assert "unknown corpus" in validate_form({**form, "mix": "europarl=1"})[0]
    cmd = build_command(form, "runs/x")
    args = build_parser().parse_args(cmd[cmd.index("trainer.train") + 1 :])
    assert args.mix == "tatoeba=1,multi30k=2,bcontrast=1,ding=1" and args.train_tsv is None
    assert args.vocab_from == "sentences" and args.select == "chrf"
    check_args(args)
    sentences, _, _, valid = load_data(args)
    assert sum(p.src == "A man rides a horse." for p in sentences) == 2  # multi30k's share is 2
    assert not any(p.src.startswith(("Good morning", "Two dogs")) for p in sentences)  # no evaluation sentence
    assert {p.src for p in valid} >= {"A girl sings."}
    args.mix = "multi30k=1"  # only the corpora named
    assert {p.src for p in load_data(args)[0]} == {"A man rides a horse."}
    with pytest.raises(ValueError, match="--mix"):
        check_args(build_parser().parse_args(["--out", "x", "--mix", "ding=1", "--train-tsv", "a.tsv"]))


def test_a_missing_prepared_file_says_how_to_make_it(tmp_path):
    with pytest.raises(DataError, match="python -m corpora prepare all"):
        read_tsv(tmp_path / "prepared" / "mixture.train.tsv.gz")


def test_the_suite_scores_the_named_sets_and_refuses_an_unknown_name(sources, make_model, tokenizer, tmp_path, capsys):
    """``python -m evaluation.evaluate --suite --suite-sets``: only the sets named (the Tatoeba held-out one with its
    two references), the goal sentences verbatim, the JSON report; a name that is not a set exits 2 listing them."""
    import json

    from evaluation import evaluate
    from model.checkpoint import save_checkpoint

    prepare_corpora({c: sources[c] for c in ("tatoeba", "multi30k", "bcontrast")}, sources["out"], sources["shared"])
    ckpt = save_checkpoint(tmp_path / "tiny", make_model(), tokenizer, {"step": 1})
    common = [
        "--checkpoint",
        str(ckpt),
        "--suite",
        "--suite-strategies",
        "greedy",
        "--prepared",
        str(sources["out"]),
        "--shared",
        str(sources["shared"]),
    ]
    report = tmp_path / "suite.json"
    assert evaluate.main([*common, "--suite-sets", "tatoeba held-out, multi30k test2016", "--json", str(report)]) == 0
    got = json.loads(report.read_text())
    assert [(r["name"], r["sentences"], r["references"]) for r in got["sets"]] == [
        ("multi30k test2016", 1, 1),
        ("tatoeba held-out", 1, 2),
    ]
    assert list(got["goal"]) == [
        "The cat sat on the mat.",
        "I am hungry.",
        "Bobby likes blackberries.",
        "The weather is nice today.",
        "My brother lives in Berlin.",
        "Thank you very much.",
    ]
    assert got["missing"] == []  # newstest is missing here, but it was not asked for
    capsys.readouterr()
    assert evaluate.main([*common, "--suite-sets", "tatoeba,everyday"]) == 2
    out = capsys.readouterr().out
    assert "no evaluation set named 'tatoeba'" in out and "tatoeba held-out" in out and "Traceback" not in out
    # With the loop guard: an untrained model's goal sentences stop looping, and the report says how it decoded.
    guarded = tmp_path / "guarded.json"
    assert (
        evaluate.main([*common, "--suite-sets", "multi30k test2016", "--loop-guard", "2", "--json", str(guarded)]) == 0
    )
    assert "with the loop guard: no phrase of 1–8 tokens 2 times in a row" in capsys.readouterr().out
    outs = [o["greedy"] for o in json.loads(guarded.read_text())["goal"].values()]
    assert json.loads(guarded.read_text())["decoding"]["loop_times"] == 2
    assert all(longest_repeat(o) < 2 for o in outs), outs
    with pytest.raises(SystemExit):
        evaluate.main([*common, "--loop-guard", "1"])
