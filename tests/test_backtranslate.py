"""Back-translation: a German → English model trained with --reverse, the synthetic pairs python -m
tools.backtranslate makes with it (tagged, continued after a stop), the mixture's share of them, the batched
sampler, and the pages, which explore English → German models only."""

from __future__ import annotations

import gzip
import json
import shutil
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from train_helpers import TINY, run_main

from corpora import mixture, parallel
from corpora.extra import MAX_CHARS
from corpora.files import DataError, Pair, read_tsv
from decoding.batched import greedy_batch
from decoding.sampling import SamplingError, sample_batch, sampled_translate_texts
from launching.form import mixture_errors
from model.checkpoint import load_checkpoint
from tools import backtranslate as bt
from trainer import train
from trainer.options import build_parser, check_args
from training.checkpoints import GERMAN_PROBE_SENTENCES
from training.data import load_data, reversed_pairs
from training.runs import read_probes

GERMAN = [
    "Das ist gut.",
    "Wir danken Ihnen.",
    "Das ist gut.",
    "Vielen Dank.",
    "x" * 500,
    "Die Sitzung ist eröffnet.",
    "Das Wort hat der Kollege.",
    "Wir stimmen ab.",
]


@pytest.fixture(scope="module")
def de_en(tmp_path_factory):
    """A tiny German → English run (12 steps on the shipped Ding pairs turned round): its folder."""
    out = tmp_path_factory.mktemp("de-en") / "run"
    torch.manual_seed(0)
    rc, _, err = run_main(train.main, ["--out", out, "--max-steps", "12", "--reverse", *TINY])
    assert rc == 0, err
    return out


def _settings(run: Path, mono: Path, **changes) -> bt.Settings:
    values = dict(
        checkpoint=str(run / "best"), mono=str(mono), strategy="sample", top_k=5, beam=2, tag="bt", seed=0, limit=0
    )
    values.update(changes)
    return bt.Settings(**values)


def _mono(tmp_path: Path) -> Path:
    path = tmp_path / "mono.de.txt.gz"
    with gzip.open(path, "wt", encoding="utf-8") as f:
        f.write("\n".join(GERMAN) + "\n\n")
    return path


def test_reverse_turns_every_pair_round(tmp_path):
    pairs = [Pair("The cat.", "Die Katze."), Pair("Hello.", "Hallo.")]
    assert reversed_pairs(pairs) == [Pair("Die Katze.", "The cat."), Pair("Hallo.", "Hello.")]
    tsv = tmp_path / "pairs.tsv"
    tsv.write_text("The cat.\tDie Katze.\nHello.\tHallo.\n", encoding="utf-8")
    config = build_parser().parse_args(["--out", "x", "--train-tsv", str(tsv), "--valid-tsv", str(tsv), "--reverse"])
    sentences, _, _, valid = load_data(config)
    assert sentences == valid == reversed_pairs(pairs)


def test_reverse_is_for_translators_only():
    for extra in (["--arch", "decoder-only"], ["--arch", "decoder-only", "--corpus", "brown"]):
        with pytest.raises(ValueError, match="--reverse swaps the sides"):
            check_args(build_parser().parse_args(["--out", "x", "--reverse", *extra]))


def test_a_reversed_run_says_its_direction_and_probes_german(de_en):
    card = json.loads((de_en / "best" / "card.json").read_text(encoding="utf-8"))
    assert card["direction"] == "de-en" and card["task"] == "German → English translation (back-translation)"
    probes = read_probes(de_en)
    assert probes and [p.source for p in probes[0].probes] == GERMAN_PROBE_SENTENCES


@pytest.fixture
def keep_every_pair(monkeypatch):
    """The tiny model's English is noise that the cleaning would drop; these tests are about the file, not it."""
    monkeypatch.setattr(bt, "clean_synthetic", lambda pairs, tag: bt.Cleaned(pairs, {}))


def test_backtranslation_writes_tagged_pairs_of_real_german(de_en, tmp_path, keep_every_pair):
    out = tmp_path / "prepared"
    path, cleaned = bt.backtranslate(_settings(de_en, _mono(tmp_path)), out, progress=False)
    assert path == parallel.prepared_path("backtranslated", "train", out)
    pairs = read_tsv(path)
    assert pairs == cleaned.pairs
    germans = [p.tgt for p in pairs]
    # each once, none over MAX_CHARS characters, and "Vielen Dank." left out: it is the everyday test set's German
    assert germans == [g for g in dict.fromkeys(GERMAN) if len(g) <= MAX_CHARS and g != "Vielen Dank."][: len(germans)]
    assert len(germans) >= 4 and all(p.src.startswith("bt ") and "\t" not in p.src for p in pairs)
    assert not (out / "backtranslated.partial.tsv").exists()
    assert json.loads((out / "backtranslated.json").read_text())["strategy"] == "sample"


def test_a_stopped_backtranslation_continues_to_the_same_file(de_en, tmp_path, monkeypatch, keep_every_pair):
    monkeypatch.setattr(bt, "CHUNK", 2)
    mono = _mono(tmp_path)
    whole, _ = bt.backtranslate(_settings(de_en, mono), tmp_path / "whole", progress=False)
    real = bt.translate_chunk
    calls = []

    def stop_at_the_third_chunk(ckpt, texts, settings, index):
        calls.append(index)
        if index == 2:
            raise KeyboardInterrupt
        return real(ckpt, texts, settings, index)

    monkeypatch.setattr(bt, "translate_chunk", stop_at_the_third_chunk)
    with pytest.raises(KeyboardInterrupt):
        bt.backtranslate(_settings(de_en, mono), tmp_path / "stopped", progress=False)
    partial = tmp_path / "stopped" / "backtranslated.partial.tsv"
    assert len(partial.read_text(encoding="utf-8").splitlines()) == 4
    partial.write_text(partial.read_text(encoding="utf-8") + "half a li", encoding="utf-8")  # killed mid-line
    monkeypatch.setattr(bt, "translate_chunk", real)
    again, _ = bt.backtranslate(_settings(de_en, mono), tmp_path / "stopped", progress=False)
    assert read_tsv(again) == read_tsv(whole)

    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "backtranslated.partial.tsv").write_text("a\tb\n", encoding="utf-8")
    (tmp_path / "other" / "backtranslated.json").write_text("{}", encoding="utf-8")
    with pytest.raises(DataError, match="made with other settings"):
        bt.backtranslate(_settings(de_en, mono), tmp_path / "other", progress=False)


def test_the_command_refuses_an_english_to_german_model_and_a_missing_file(de_en, tmp_path):
    rc, _, err = run_main(
        bt.main,
        ["--checkpoint", ROOT / "checkpoints" / "en-de", "--mono", _mono(tmp_path), "--out", tmp_path, "--no-progress"],
    )
    assert rc == 2 and "is not a German → English translator" in err
    rc, _, err = run_main(
        bt.main,
        [
            "--checkpoint",
            de_en / "best",
            "--mono",
            tmp_path / "gone.txt",
            "--out",
            tmp_path,
            "--tag",
            "bt",
            "--no-progress",
        ],
    )
    assert rc == 2 and "No such data file" in err
    # the tiny model's 500 pieces have no "#": the default tag would start every source with <unk>
    rc, _, err = run_main(
        bt.main, ["--checkpoint", de_en / "best", "--mono", _mono(tmp_path), "--out", tmp_path, "--no-progress"]
    )
    assert rc == 2 and "the tag '#bt' has characters the vocabulary does not know" in err and "<unk>" in err
    assert not (tmp_path / "backtranslated.partial.tsv").exists()
    rc, out, err = run_main(
        bt.main,
        [
            "--checkpoint",
            de_en / "best",
            "--mono",
            _mono(tmp_path),
            "--strategy",
            "beam",
            "--limit",
            "3",
            "--out",
            tmp_path / "beam",
            "--tag",
            "bt",
            "--no-progress",
        ],
    )
    assert rc == 0, err
    assert "synthetic pairs" in out and "backtranslated=1" in out


def test_the_default_tag_is_made_of_pieces_the_shipped_vocabulary_knows():
    tokenizer = load_checkpoint(ROOT / "checkpoints" / "en-de").tokenizer
    bt.check_tag(tokenizer, bt.TAG)
    bt.check_tag(tokenizer, "")  # no tag at all is allowed
    # mathematical angle brackets: no piece of the 16k vocabulary (ASCII '<bt>' reads as ▁< bt > there)
    with pytest.raises(
        DataError,
        match=r"'⟨bt⟩' .* reads as ▁ <unk> bt <unk>\): choose another with --tag, for "
        r"example '#bt'",
    ):
        bt.check_tag(tokenizer, "⟨bt⟩")


def test_the_mixture_takes_the_backtranslated_pairs_once_made(tmp_path):
    with pytest.raises(DataError, match="python -m tools.backtranslate"):
        mixture.mixture_pairs({"ding": 1, "backtranslated": 1}, tmp_path, tmp_path)
    assert any("python -m tools.backtranslate" in e for e in mixture_errors("ding=1,backtranslated=1", tmp_path))
    parallel.write_tsv_gz(
        parallel.prepared_path("backtranslated", "train", tmp_path),
        [Pair("#bt It is good.", "Es ist gut."), Pair("#bt We vote.", "Wir stimmen ab.")],
    )
    mix = mixture.mixture_pairs({"backtranslated": 2}, tmp_path, tmp_path)
    assert mix.counts == {"backtranslated": 4} and Pair("#bt We vote.", "Wir stimmen ab.") in mix.train
    assert mixture_errors("backtranslated=1", tmp_path) == []


def test_batched_sampling_is_seeded_and_top_1_is_greedy(de_en):
    ckpt = load_checkpoint(de_en / "best")
    texts = ["Das ist gut.", "Wir stimmen ab.", "Die Sitzung ist eröffnet."]
    one = sampled_translate_texts(ckpt.model, ckpt.tokenizer, texts, top_k=5, seed=3)
    assert one == sampled_translate_texts(ckpt.model, ckpt.tokenizer, texts, top_k=5, seed=3)
    src = [ckpt.tokenizer.encode(t).ids + [ckpt.config.eos_id] for t in texts]
    assert greedy_batch(ckpt.model, src, pick=sample_batch(top_k=1)) == greedy_batch(ckpt.model, src)
    for bad in ({"temperature": 0.0}, {"top_k": -1}):
        with pytest.raises(SamplingError):
            sample_batch(**bad)


def test_the_pages_refuse_a_german_to_english_model_with_a_message(de_en, tmp_path, monkeypatch):
    from streamlit.testing.v1 import AppTest

    root = tmp_path / "models"
    root.mkdir()
    shutil.copytree(de_en / "best", root / "de-en")  # a copy: the picker refuses links out of its folders
    monkeypatch.chdir(ROOT)
    monkeypatch.setenv("ATTENTION_EXPLORER_CHECKPOINTS", str(root))
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=60)
    at.query_params["ckpt"] = "de-en"
    at.run()
    assert not at.exception
    assert any("translates German → English" in e.value for e in at.error)


def test_the_preset_starts_from_the_shipped_translator_and_trains_it_german_first(tmp_path, monkeypatch):
    from launching.form import build_command, preset_form, validate_form

    monkeypatch.setattr(parallel, "PREPARED", tmp_path)
    form = preset_form("German → English, for back-translation (GPU minutes, CPU hours)")
    for corpus in mixture.MIXABLE[:-1]:
        parallel.prepared_path(corpus, "train", tmp_path).touch()
    assert validate_form(form) == []
    cmd = build_command(form, "runs/de-en")
    args = build_parser().parse_args(cmd[cmd.index("trainer.train") + 1 :])
    check_args(args)
    # its weights, BPE and architecture are the shipped model's (a warm start keeps them); its schedule starts
    # again at step 0, not where the shipped run's ended (a rate of 0)
    assert args.reverse and args.init_from == "checkpoints/en-de" and args.tokenizer is None
    assert args.lr_step_offset == 0 and args.peak_lr == 1.2e-3
    assert "backtranslated" not in mixture.parse_repeats(args.mix, {})  # its own output is not its input


def test_the_launch_form_checks_the_direction_against_the_architecture():
    from launching.form import form_defaults, validate_form

    ok = {**form_defaults(), "reverse": True}
    assert validate_form(ok) == []
    for bad in ({"arch": "decoder-only"}, {"arch": "decoder-only", "data": "brown"}):
        assert any("German → English turns translation pairs round" in e for e in validate_form({**ok, **bad}))


def test_the_training_page_shows_the_presets_direction(monkeypatch):
    from streamlit.testing.v1 import AppTest

    monkeypatch.chdir(ROOT)
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=60)
    at.run()
    at.switch_page("app_pages/training/training.py").run()
    assert not at.exception
    preset = "German → English, for back-translation (GPU minutes, CPU hours)"
    at.selectbox(key="tn_form_preset").select(preset).run()
    assert at.checkbox(key=f"tn_form_rev_{preset}").value is True


def test_synthetic_pairs_that_run_on_stop_short_or_loop_are_dropped():
    german = "Wir kommen zur Abstimmung über den Änderungsantrag der Fraktionen."
    pairs = [
        Pair("#bt We come to the vote on the amendment of the groups.", german),
        Pair("#bt We come to the vote.", german),  # says less than half of the German
        # runs on past 400 characters
        Pair("#bt " + "We come to the vote on the amendment of the CDU/CSU and F.D.P. " * 7, german),
        Pair("#bt The amendment of the the the groups is voted on here.", german),  # loops
        Pair("#bt ", german),
        Pair("#bt Yes.", "Ja."),
    ]
    cleaned = bt.clean_synthetic(pairs, "#bt")
    assert cleaned.pairs == [pairs[0], pairs[5]]  # a short pair may differ in length: "Yes." / "Ja."
    assert cleaned.dropped == {"length ratio": 1, "too long": 1, "looping": 1, "empty": 1}


def test_the_command_says_what_it_dropped(de_en, tmp_path):
    rc, out, err = run_main(
        bt.main,
        [
            "--checkpoint",
            de_en / "best",
            "--mono",
            _mono(tmp_path),
            "--strategy",
            "greedy",
            "--out",
            tmp_path,
            "--tag",
            "bt",
            "--no-progress",
        ],
    )
    assert rc == 0, err
    meta = json.loads((tmp_path / "backtranslated.json").read_text(encoding="utf-8"))
    # the five German sentences left of GERMAN (each once, none over 400 characters, not the everyday set's)
    assert meta["translated"] == 5 and meta["translated"] - sum(meta["dropped"].values()) == len(
        read_tsv(tmp_path / "backtranslated.train.tsv.gz", allow_empty=True)
    )
    assert "synthetic pairs" in out and all(f"{reason} {n:,}" in out for reason, n in meta["dropped"].items())
