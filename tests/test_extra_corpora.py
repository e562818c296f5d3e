"""corpora.extra: the general-domain files read, cleaned, split and kept apart from every evaluation set (FLORES-200
devtest among them), mixed by file stem; the suite's FLORES set, repeat check and tokenizer coverage; the domain
adaptation preset. Small fixtures written here in the files' own format: nothing from ../shared is needed."""

from __future__ import annotations

import json

import pytest
from test_parallel_corpora import english_in, write_lines

from corpora import __main__ as cli
from corpora.extra import DEFAULT_VALID, EXTRA_CORPORA, FLORES, MAX_CHARS, clean_pairs, read_extra, split_extra
from corpora.files import DataError, Pair, read_tsv, split_key
from corpora.mixture import mixture_pairs, parse_repeats, prepared_corpora
from corpora.parallel import evaluation_keys, evaluation_sets, prepare_corpora, prepared_path
from evaluation.suite import available_sets, markdown, piece_stats, repeat_check

FLORES_EN = "Scientists announced a new diabetes test on Monday."


@pytest.fixture
def shared(tmp_path):
    """A shared data folder (:func:`write_shared`)."""
    return write_shared(tmp_path)


def write_shared(tmp_path):
    """A shared data folder with two general-domain files (news with a held-out sentence and two references of it,
    a FLORES sentence, a paragraph, a misaligned pair, an untranslated string, a duplicate) and FLORES devtest."""
    held_out = english_in(DEFAULT_VALID)
    news = [
        "The market fell sharply.\tDer Markt fiel stark.\tnewstest2017",
        f"{held_out}\tDer Minister sprach.\tnewstest2019",
        f"{held_out}\tDie Ministerin sprach.\tnt19-HQp",
        f"{FLORES_EN}\tWissenschaftler kündigten am Montag einen neuen Diabetestest an.\tnewstest2015",
        f"{'Long sentence. ' * 30}\t{'Langer Satz. ' * 30}\tgeneraltest2023",
        "A short headline about the vote.\tEine kurze Überschrift zur Abstimmung, die viel zu lang geraten ist "
        "und nicht zum Englischen passt.\tnewstest2012",
        "apt-get install foo\tapt-get install foo\tnewstest2010",
        "The market fell sharply.\tDer Markt fiel stark.\tnewstest2017",
        "OK.\tIn Ordnung.\tnewstest2011",
    ]
    wiki = ["The river flows north.\tDer Fluss fließt nach Norden.\tmlqe-pe-train"]
    write_lines(tmp_path / "extra" / "train" / "wmt-news-extra.en-de.tsv.gz", news)
    write_lines(tmp_path / "extra" / "train" / "mlqe-pe.en-de.tsv.gz", wiki)
    write_lines(tmp_path.joinpath(*FLORES), [f"{FLORES_EN}\tWissenschaftler gaben am Montag einen neuen Test bekannt."])
    return {
        "shared": tmp_path,
        "out": tmp_path / "prepared",
        "held_out": held_out,
        "train": tmp_path / "extra" / "train",
    }


def test_a_file_reads_with_or_without_the_sub_source_and_bad_ones_are_named(tmp_path):
    path = tmp_path / "x.en-de.tsv.gz"
    write_lines(path, ["Hi.\tHallo.\tsrc-a", "", "Go.\tGeh.", "\tleer\tsrc"])
    assert read_extra(path) == [Pair("Hi.", "Hallo."), Pair("Go.", "Geh.")]
    for lines, match in (
        (["Hi.\tHallo.\ta\tb"], "line 1: expected 'English<TAB>German<TAB>sub-source', got 4"),
        (["Hi.", "Go.\tGeh."], "line 1:.*got 1 column"),
        (["", ""], "holds no"),
    ):
        write_lines(path, lines)
        with pytest.raises(DataError, match=match):
            read_extra(path)
    with pytest.raises(DataError, match="No such data file"):
        read_extra(tmp_path / "missing.en-de.tsv.gz")


def test_cleaning_drops_long_misaligned_untranslated_and_repeated_pairs_only():
    pairs = [
        Pair("A" * (MAX_CHARS + 1), "B"),
        Pair("Short.", "Ein viel zu langer deutscher Satz hier."),
        Pair("foo --bar", "foo --bar"),
        Pair("Yes.", "Ja."),
        Pair("Yes.", "Ja."),
        Pair("OK.", "In Ordnung."),
        Pair("Yes.", "Jawohl."),
    ]
    cleaned = clean_pairs(pairs)
    assert cleaned.pairs == [Pair("Yes.", "Ja."), Pair("OK.", "In Ordnung."), Pair("Yes.", "Jawohl.")]
    assert cleaned.dropped == {"too long": 1, "length ratio": 1, "untranslated": 1, "duplicate": 1}


def test_the_split_keeps_every_reference_of_one_sentence_together():
    held_out = english_in(DEFAULT_VALID)
    splits = split_extra("wmt-news-extra", [Pair(held_out, "A."), Pair("Kept.", "B."), Pair(held_out, "C.")])
    assert [p.tgt for p in splits["valid"]] == ["A.", "C."] and splits["train"] == [Pair("Kept.", "B.")]
    assert split_extra("wmt19-20-extra-refs", [Pair(held_out, "A.")])["valid"] == []  # held out with its news


def test_prepare_extra_keeps_flores_and_held_out_sentences_out_of_every_training_file(shared, capsys):
    out = shared["out"]
    assert cli.main(["prepare", "extra", "--source", str(shared["train"]), "--out", str(out)]) == 2
    assert "No wmt19-20-extra-refs.en-de.tsv.gz" in capsys.readouterr().err  # every file, or nothing written
    done = prepare_corpora({"wmt-news-extra": shared["train"], "mlqe-pe": shared["train"]}, out, shared["shared"])
    news = done["wmt-news-extra"]
    assert news.removed == 1 and news.counts == {"train": 2, "valid": 2}  # FLORES's sentence, the held-out one
    assert news.dropped == {"too long": 1, "length ratio": 1, "untranslated": 1, "duplicate": 1}
    keys = evaluation_keys(evaluation_sets(out, shared["shared"]))
    assert split_key(FLORES_EN) in keys and split_key(shared["held_out"]) in keys
    train = read_tsv(prepared_path("wmt-news-extra", "train", out))
    assert {p.src for p in train} == {"The market fell sharply.", "OK."}
    assert len(read_tsv(prepared_path("general", "valid", out))) == 2  # news and Wikipedia held out together
    assert "wmt-news-extra" in prepared_corpora(out) and "gnome-help" not in prepared_corpora(out)


def test_the_cli_prints_what_cleaning_dropped_and_all_says_when_extra_is_absent(shared, tmp_path, capsys):
    for name in EXTRA_CORPORA[2:]:
        write_lines(shared["train"] / f"{name}.en-de.tsv.gz", [f"A {name} sentence.\tEin Satz aus {name}.\t{name}"])
    write_lines(shared["train"] / "wmt19-20-extra-refs.en-de.tsv.gz", ["Another.\tNoch einer.\tnt19-AR"])
    assert cli.main(["prepare", "extra", "--source", str(shared["shared"] / "extra"), "--out", str(shared["out"])]) == 0
    printed = capsys.readouterr().out
    # (the command reads the evaluation sets of ../shared/data, not this fixture's FLORES: no removal asserted here)
    assert "wmt-news-extra: train " in printed and "gnome-help: train 1, valid 0 pairs" in printed
    assert "dropped in cleaning: too long 1, length ratio 1, untranslated 1, duplicate 1" in printed
    write_lines(shared["train"] / "gnome-help.en-de.tsv.gz", ["a\tb\tc\td"])
    assert cli.main(["prepare", "extra", "--source", str(shared["train"]), "--out", str(shared["out"])]) == 2
    assert "gnome-help.en-de.tsv.gz, line 1" in capsys.readouterr().err
    assert cli.corpora_to_prepare("all", tmp_path / "nowhere") == ("tatoeba", "multi30k", "bcontrast")
    assert "extra: not prepared, no folder" in capsys.readouterr().out
    assert cli.corpora_to_prepare("all", shared["shared"])[-len(EXTRA_CORPORA) :] == EXTRA_CORPORA


def test_a_mixture_weighs_each_general_domain_file_by_its_stem(shared):
    out = shared["out"]
    prepare_corpora({"wmt-news-extra": shared["train"], "mlqe-pe": shared["train"]}, out, shared["shared"])
    mix = mixture_pairs(parse_repeats("wmt-news-extra=2,mlqe-pe=3", {}), out, shared["shared"])
    assert mix.counts == {"wmt-news-extra": 4, "mlqe-pe": 3}
    assert sum(p.src == "The river flows north." for p in mix.train) == 3
    assert {p.src for p in mix.valid} == {shared["held_out"]}
    with pytest.raises(DataError, match=r"gnome-help not prepared.*prepare extra"):
        mixture_pairs({"gnome-help": 1}, out, shared["shared"])
    with pytest.raises(DataError, match="unknown corpus in the mixture: europarl .known: tatoeba.*wmt-news-extra"):
        parse_repeats("europarl=1")


# --- evaluation.suite --------------------------------------------------------------------------------------------
def test_the_suite_scores_flores_and_checks_every_set_for_repeated_words(shared, make_model, tokenizer, tmp_path):
    from evaluation import evaluate
    from model.checkpoint import save_checkpoint

    sets, missing = available_sets(shared["out"], shared["shared"])
    flores = next(s for s in sets if s.name == "flores200-devtest")
    assert flores.sources == [FLORES_EN] and not any(m.startswith("flores") for m in missing)
    elsewhere = available_sets(tmp_path / "p", tmp_path / "nowhere")[1]
    assert any(m.startswith("flores200-devtest: not found") for m in elsewhere)
    ckpt = save_checkpoint(tmp_path / "tiny", make_model(), tokenizer, {"step": 1})
    report = tmp_path / "suite.json"
    assert (
        evaluate.main(
            [
                "--checkpoint",
                str(ckpt),
                "--suite",
                "--suite-strategies",
                "greedy",
                "--suite-sets",
                "flores200-devtest,everyday",
                "--prepared",
                str(shared["out"]),
                "--shared",
                str(shared["shared"]),
                "--json",
                str(report),
            ]
        )
        == 0
    )
    got = json.loads(report.read_text())
    assert [r["name"] for r in got["sets"]] == ["everyday", "flores200-devtest"]
    assert got["sets"][1]["repeats"]["greedy"]["checked"] == 1
    assert got["sets"][1]["reference_repeats"] == {"checked": 1, "longest": 1, "repeating": 0, "looping": 0}
    everyday = got["sets"][0]
    assert len(everyday["outputs"]["greedy"]) == everyday["sentences"]  # every output kept, in order


def test_the_repeat_check_reads_the_first_outputs_and_the_report_says_so():
    assert repeat_check(["Das ist gut.", "ja ja nein", "Die die Katze"]) == {
        "checked": 3,
        "longest": 2,
        "repeating": 1,
        "looping": 0,
    }
    assert repeat_check(["nein nein"] * 5, checked=2) == {"checked": 2, "longest": 2, "repeating": 2, "looping": 0}
    assert repeat_check(["Frauen, die die Kinder", "die die die die"])["looping"] == 1
    row = {
        "name": "s",
        "sentences": 1,
        "references": 1,
        "scores": {"greedy": {"bleu": 1.0, "chrf": 2.0}},
        "repeats": {"greedy": {"checked": 1, "longest": 1, "repeating": 0}},
        "reference_repeats": {"checked": 1, "longest": 2, "repeating": 1},
    }
    report = {"sets": [row], "goal": {"The cat sat on the mat.": {"greedy": "x"}}}
    assert "no output repeats a word twice in a row" in markdown(report, [])
    assert "| s | 1 | 0 (–; 1) | 1 (2) |" in markdown(report, [])  # a report written before loops were counted
    row["repeats"]["greedy"].update(longest=3, repeating=1, looping=1)
    text = markdown(report, [])
    assert "| s | 1 | 1 (1; 3) | 1 (2) |" in text and "some outputs repeat a word" in text


def test_piece_stats_counts_pieces_per_word_split_words_and_unknown_pieces(tokenizer):
    stats = piece_stats(tokenizer, ["the cat", "the 🦜"])
    assert stats["texts"] == 2 and stats["words"] == 4
    pieces = [tokenizer.encode(t) for t in ("the cat", "the 🦜")]
    assert stats["pieces"] == sum(len(e.ids) for e in pieces)
    assert stats["unknown_rate"] > 0 and stats["pieces_per_word"] == round(stats["pieces"] / 4, 4)
    assert piece_stats(tokenizer, ["the"])["split_word_rate"] in (0.0, 1.0)
    with pytest.raises(ValueError, match="no words"):
        piece_stats(tokenizer, ["", "  "])


def test_the_pieces_command_prints_its_table_without_translating(shared, make_model, tokenizer, tmp_path, capsys):
    from evaluation import evaluate
    from model.checkpoint import save_checkpoint

    ckpt = save_checkpoint(tmp_path / "tiny", make_model(), tokenizer, {"step": 1})
    assert (
        evaluate.main(
            ["--checkpoint", str(ckpt), "--pieces", "--prepared", str(shared["out"]), "--shared", str(shared["shared"])]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "| flores200-devtest | English | 1 |" in out and "| flores200-devtest | German | 1 |" in out
    assert "- missing: multi30k test2016" in out and "BLEU" not in out


# --- the domain-adaptation preset ------------------------------------------------------------------------------
def test_the_adaptation_preset_continues_the_shipped_model_on_the_mixture_and_the_new_pairs(tmp_path, monkeypatch):
    from corpora import mixture, parallel
    from launching.form import build_command, preset_form, validate_form
    from trainer.options import build_parser, check_args

    monkeypatch.setattr(parallel, "PREPARED", tmp_path)
    form = preset_form("adapt the shipped translator to news and Wikipedia (hours)")
    assert any("not prepared yet" in e for e in validate_form(form))
    for corpus in mixture.MIXABLE[:-1]:
        prepared_path(corpus, "train", tmp_path).touch()
    assert validate_form(form) == []
    cmd = build_command(form, "runs/x")
    args = build_parser().parse_args(cmd[cmd.index("trainer.train") + 1 :])
    check_args(args)
    shares = parse_repeats(args.mix, {})
    assert args.init_from == "checkpoints/en-de" and shares["multi30k"] == 4 and shares["wmt-news-extra"] == 2
    assert set(EXTRA_CORPORA) <= set(shares) and args.select == "loss" and args.keep_last == 10
    assert args.peak_lr <= 2e-4 and args.warmup == args.lr_step_offset  # the schedule starts at its (low) peak
