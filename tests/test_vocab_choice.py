"""tools.vocab: candidate vocabularies learned on a mixture and measured on the evaluation sets beside the size
of the weights they would make. Small fixtures of this suite's own: nothing from ../shared is needed."""

from __future__ import annotations

import pytest
from test_extra_corpora import write_shared

from corpora.parallel import prepare_corpora
from evaluation.suite import EvalSet
from model.baseline import build_model
from model.checkpoint import save_checkpoint
from tools import vocab

NEWS = [
    "The central bank raised interest rates again on Thursday.",
    "Parliament debated the budget for hours.",
    "The minister announced new measures against inflation.",
    "Markets fell sharply after the announcement.",
]


@pytest.fixture
def shared(tmp_path):
    """Two general-domain files and FLORES, as test_extra_corpora.py's tests have them."""
    return write_shared(tmp_path)


def test_the_weights_counted_are_the_models_and_grow_by_one_embedding_row_per_piece(make_config):
    cfg = make_config()
    assert vocab.parameters(cfg, cfg.vocab_size) == sum(p.numel() for p in build_model(cfg).parameters())
    grown = vocab.parameters(cfg, cfg.vocab_size + 100) - vocab.parameters(cfg, cfg.vocab_size)
    assert grown == 100 * cfg.d_model * (1 if cfg.tie_embeddings else 3)


def test_a_larger_vocabulary_cuts_fewer_words_and_the_table_says_what_it_weighs(make_config):
    texts = NEWS * 20 + ["Die Zentralbank erhöhte am Donnerstag erneut die Zinsen."] * 20
    small, large = vocab.learn(texts, [60, 400])
    assert small.tokenizer.vocab_size < large.tokenizer.vocab_size and small.seconds >= 0
    test = EvalSet("news", "here", NEWS, [["Die Zentralbank erhöhte die Zinsen."]] * len(NEWS))
    text = vocab.table([small, large], [test], make_config())
    rows = [line for line in text.splitlines() if line.startswith("| learned")]
    assert len(rows) == 2 and "news EN split" in text and "fp16 MB" in text

    def split(row):  # the English split share of a row
        return float(row.split("|")[6].strip(" %"))

    assert split(rows[1]) < split(rows[0])
    assert "fp16 MB" not in vocab.table([small], [test], None)


def test_the_command_learns_on_the_mixture_and_names_bad_input_without_a_traceback(
    shared, make_model, tokenizer, tmp_path, capsys
):
    prepare_corpora({"wmt-news-extra": shared["train"], "mlqe-pe": shared["train"]}, shared["out"], shared["shared"])
    ckpt = save_checkpoint(tmp_path / "tiny", make_model(), tokenizer, {"step": 1})
    common = [
        "--mix",
        "wmt-news-extra=2,mlqe-pe=1",
        "--prepared",
        str(shared["out"]),
        "--shared",
        str(shared["shared"]),
        "--sets",
        "flores200-devtest",
    ]
    assert vocab.main(common + ["--sizes", "100,120", "--compare", str(ckpt), "--save", str(tmp_path / "v")]) == 0
    out = capsys.readouterr().out
    assert f"| {ckpt} (as shipped) |" in out and out.count("| learned") == 2
    assert "flores200-devtest EN split" in out and "int8 MB" in out
    assert sorted(p.suffix for p in (tmp_path / "v").iterdir()) == [".json", ".json"]
    for bad, message in (
        (["--sizes", "eight"], "whole numbers"),
        (["--sizes", "10"], "at least 100"),
        (["--compare", str(tmp_path / "nowhere")], "error:"),
        (["--mix", "gnome-help=1"], "gnome-help not prepared"),
    ):
        assert vocab.main(common + bad) == 2
        assert message in capsys.readouterr().out
    assert vocab.main(common[:-1] + ["no such set"]) == 2
    assert "none of the sets" in capsys.readouterr().out


@pytest.mark.parametrize("sizes", ["", " , "])
def test_no_size_at_all_is_refused(sizes, capsys):
    assert vocab.main(["--mix", "tatoeba=1", "--sizes", sizes]) == 2
    assert "--sizes" in capsys.readouterr().out
