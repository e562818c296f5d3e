"""``python -m trainer.train --arch decoder-only``: a GPT-style language model trained on both sides of the pairs
(in-process, tiny): best/ loads as decoder-only, loss + perplexity instead of BLEU, probes continue the probe
sentences with self-attention, --test-at-end, exact --resume, the baseline refused, and the checkpoint opens in
the app."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from streamlit.testing.v1 import AppTest
from train_helpers import TINY, run_main

from corpora.files import Pair
from evaluation.evaluate import validation_loss
from model.checkpoint import load_checkpoint
from trainer import train
from training.batches import EpochPlan, collate, encode_examples, sequences_per_pair
from training.checkpoints import LM_PROBE_PROMPTS
from training.config import TrainConfig
from training.data import monolingual
from training.runs import read_status, snapshot_steps

# One worker runs every test here, so the module's language models are trained once, not once per worker
pytestmark = pytest.mark.xdist_group("lm-runs")

ROOT = Path(__file__).resolve().parent.parent
LM = ["--arch", "decoder-only", *TINY]


@pytest.fixture(scope="module")
def lm_runs(tmp_path_factory):
    """``straight`` (12 steps, --test-at-end) and ``resumed`` (6 steps, then ``--resume --max-steps 12``)."""
    root = tmp_path_factory.mktemp("lm-runs")
    torch.manual_seed(0)
    straight = run_main(train.main, ["--out", root / "straight", "--max-steps", "12", "--test-at-end", *LM])
    first_half = run_main(train.main, ["--out", root / "resumed", "--max-steps", "6", *LM])
    torch.manual_seed(123)  # the resumed run must not depend on the state of the process it runs in
    second_half = run_main(
        train.main, ["--out", root / "resumed", "--resume", "--max-steps", "12", "--no-progress", "--threads", "1"]
    )
    return {"root": root, "straight": straight, "first_half": first_half, "second_half": second_half}


def _records(folder: Path) -> list[dict]:
    return [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]


def test_a_tiny_language_model_trains_and_loads_as_decoder_only(lm_runs):
    rc, out, err = lm_runs["straight"]
    assert rc == 0, err
    folder = lm_runs["root"] / "straight"
    assert "stopped at step 12 (max_steps)" in out and "perplexity" in out and "BLEU" not in out
    for name in ("best", "last", "checkpoints/step-0"):
        ckpt = load_checkpoint(folder / name)
        assert ckpt.config.arch == "decoder-only" and not ckpt.config.is_encoder_decoder
        assert ckpt.config.n_encoder_layers == 0 and ckpt.config.n_decoder_layers == 1
        assert len(ckpt.model.encoder_layers) == 0
    assert json.loads((folder / "config.json").read_text())["arch"] == "decoder-only"
    assert json.loads((folder / "train_args.json").read_text())["arch"] == "decoder-only"
    assert read_status(folder)["state"] == "finished"

    records = _records(folder)
    assert [r["step"] for r in records if "loss" in r] == [3, 6, 9, 12]
    evals = [r for r in records if "valid_loss" in r]
    assert [r["step"] for r in evals] == [6, 12]
    for r in evals:  # perplexity, and no fake translation metrics
        assert math.isfinite(r["valid_loss"]) and r["valid_ppl"] == pytest.approx(math.exp(r["valid_loss"]), rel=1e-3)
        assert not {"valid_bleu", "valid_chrf"} & set(r)
    (test,) = [r for r in records if "test_loss" in r]
    assert test["test_ppl"] == pytest.approx(math.exp(test["test_loss"]), rel=1e-3) and "test_bleu" not in test

    state = json.loads((folder / "last" / "trainer_state.json").read_text())
    card = json.loads((folder / "best" / "card.json").read_text())
    assert card["step"] == state["best_step"] and "language model" in card["task"]
    assert card["valid"]["loss"] == state["best_valid_loss"] and card["valid"]["sequences"] > 0
    assert "bleu" not in card["valid"] and card["valid"]["perplexity"] > 1
    assert card["test"]["loss"] == test["test_loss"] and card["test"]["perplexity"] == test["test_ppl"]


def test_probes_continue_the_probe_prompts_with_self_attention(lm_runs):
    folder = lm_runs["root"] / "straight"
    records = [json.loads(line) for line in (folder / "probes.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == snapshot_steps(12)
    tok = load_checkpoint(folder / "best").tokenizer
    for probe, sentence in zip(records[-1]["probes"], LM_PROBE_PROMPTS, strict=True):
        assert probe["source"] == sentence and isinstance(probe["continuation"], str)
        assert "translation" not in probe and probe["src_tokens"] == []
        assert list(probe["attention"]) == ["self"]
        tokens, n_prompt = probe["tgt_tokens"], probe["prompt_tokens"]
        assert tokens[:n_prompt] == ["<bos>", *tok.encode(sentence).tokens]  # the prompt, then its continuation
        assert len(tokens) > n_prompt or probe["continuation"] == ""
        att = probe["attention"]["self"]  # [layers][heads][q][k], causal
        assert len(att) == 1 and len(att[0]) == 2 and len(att[0][0]) == len(tokens) == len(att[0][0][0])
        for row_i, row in enumerate(att[0][1]):
            assert abs(sum(row) - 1) < 1e-2 and all(x == 0 for x in row[row_i + 1 :])


def test_resume_of_a_language_model_is_exact(lm_runs):
    for key in ("first_half", "second_half"):
        rc, _, err = lm_runs[key]
        assert rc == 0, err
    straight, resumed = lm_runs["root"] / "straight", lm_runs["root"] / "resumed"
    for name in ("model.safetensors", "optimizer.safetensors"):
        a, b = load_file(str(straight / "last" / name)), load_file(str(resumed / "last" / name))
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a), name
    sa = json.loads((straight / "last" / "trainer_state.json").read_text())
    sb = json.loads((resumed / "last" / "trainer_state.json").read_text())
    for k in ("step", "epoch", "batch", "tokens_seen", "best_valid_loss", "best_step"):
        assert sa[k] == sb[k], k
    evals = [(r["valid_loss"], r["valid_ppl"]) for r in _records(resumed) if "valid_loss" in r]
    assert evals == [(r["valid_loss"], r["valid_ppl"]) for r in _records(straight) if "valid_loss" in r]
    assert load_checkpoint(resumed / "best").config.arch == "decoder-only"


def test_the_baseline_refuses_decoder_only(tmp_path):
    rc, _, err = run_main(train.main, ["--out", tmp_path / "x", "--impl", "torch", *LM, "--max-steps", "3"])
    assert rc == 2 and "encoder-decoder only" in err and "--arch decoder-only" in err
    assert not (tmp_path / "x" / "config.json").exists()  # refused before anything was trained


def test_language_model_examples_are_the_sides_of_the_pairs(lm_runs):
    ckpt = load_checkpoint(lm_runs["root"] / "straight" / "best")
    cfg, tok = ckpt.config, ckpt.tokenizer
    pairs = [Pair("The house is big.", "Das Haus ist groß."), Pair("Good morning.", "Guten Morgen.")]
    examples = encode_examples(tok, pairs, cfg)
    assert [tok.decode(e.tgt[1:-1]) for e in examples] == [
        "The house is big.",
        "Das Haus ist groß.",
        "Good morning.",
        "Guten Morgen.",
    ]
    assert all(e.src == [] and e.tgt[0] == cfg.bos_id and e.tgt[-1] == cfg.eos_id for e in examples)
    batch = collate(examples, [0, 3], cfg.pad_id, "cpu")
    longest = max(len(examples[0].tgt), len(examples[3].tgt))
    assert batch.src.shape == (2, 0) and batch.tgt_in.shape == batch.tgt_out.shape == (2, longest - 1)
    assert batch.n_src == 0 and batch.n_pred == len(examples[0].tgt) + len(examples[3].tgt) - 2
    assert sequences_per_pair(cfg) == 2
    # --phrases-per-epoch counts pairs: a language model samples two sequences per pair.
    config = TrainConfig(seed=1, phrases_per_epoch=1, batch_tokens=500)
    chosen, batches = EpochPlan(examples[:1], examples, [], config, lambda e: e, per_pair=2).examples(0)
    assert len(chosen) == 3 and sorted(i for b in batches for i in b) == [0, 1, 2]


def test_the_translate_cli_continues_a_prompt_with_a_language_model(lm_runs, tmp_path):
    """``python -m decoding.translate`` with a decoder-only checkpoint continues the text (it used to ignore it and
    generate from <bos> alone): the JSON says ``continuation``, and its trace covers <bos> + prompt + output."""
    from decoding import translate

    best = lm_runs["root"] / "straight" / "best"
    tok = load_checkpoint(best).tokenizer
    rc, out, err = run_main(translate.main, ["--checkpoint", best, "--json", "The house"])
    assert rc == 0, err
    result = json.loads(out)
    assert "translation" not in result and isinstance(result["continuation"], str)
    n_prompt = 1 + len(tok.encode("The house").ids)
    n_out = len([i for i in result["tgt_ids"] if i != 2])
    assert result["attention_shapes"]["self"][2:] == [n_prompt + n_out, n_prompt + n_out]
    rc, out, err = run_main(translate.main, ["--checkpoint", best, "--strategy", "beam", "--json", "The house"])
    assert rc == 0 and "continuation" in json.loads(out)["beam"][0], err
    path = tmp_path / "prompts.txt"
    path.write_text("The house\n\nShe said\n", encoding="utf-8")
    rc, out, err = run_main(translate.main, ["--checkpoint", best, "--input", path])
    assert rc == 0 and len(out.splitlines()) == 3, err


def test_the_evaluate_cli_scores_a_language_model_by_perplexity(lm_runs, tmp_path):
    from evaluation import evaluate

    best = lm_runs["root"] / "straight" / "best"
    path = tmp_path / "text.txt"
    path.write_text("The house is big.\nShe reads a book.\n", encoding="utf-8")
    rc, out, err = run_main(evaluate.main, ["--checkpoint", best, "--text", path])
    assert rc == 0, err
    scores = json.loads(out)
    assert scores["sequences"] == 2 and scores["tokens"] > 2 and "bleu" not in scores
    assert scores["perplexity"] == pytest.approx(math.exp(scores["loss"]), rel=1e-3)
    # the same number as the trainer's validation loss on the same sentences
    ckpt = load_checkpoint(best)
    examples = encode_examples(ckpt.tokenizer, monolingual(["The house is big.", "She reads a book."]), ckpt.config)
    loss = validation_loss(ckpt.model, examples, 100, ckpt.model.device)
    assert scores["loss"] == pytest.approx(loss, abs=1e-4)
    (tmp_path / "blank.txt").write_text("\n\n", encoding="utf-8")
    rc, _, err = run_main(evaluate.main, ["--checkpoint", best, "--text", tmp_path / "blank.txt"])
    assert rc == 2 and err.startswith("error:")


def test_a_trained_language_model_opens_in_the_app(lm_runs, monkeypatch, tmp_path):
    """The trainer's decoder-only best/ on the translate page: the typed text is the prompt, the model continues."""
    shutil.copytree(lm_runs["root"] / "straight" / "best", tmp_path / "lm")  # the picker refuses links out
    monkeypatch.chdir(ROOT)
    monkeypatch.setenv("ATTENTION_EXPLORER_CHECKPOINTS", str(tmp_path))
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=90)
    at.query_params["ckpt"] = "lm"
    at.run()
    at.switch_page("app_pages/translate/translate.py").run()
    assert not at.exception, at.exception[0].message
    assert any(c.value.startswith("decoder-only") and "test perplexity" in c.value for c in at.sidebar.caption)
    for _ in range(2):  # two steps of the continuation, with self-attention instead of cross-attention
        [b for b in at.button if b.label == "Next"][0].click().run()
        assert not at.exception, at.exception[0].message
    assert any("Masked self-attention of step 2" in m.value for m in at.markdown)


def test_a_language_model_trains_on_the_brown_corpus(tmp_path):
    """``--corpus brown``: English sentences only, test-at-end on the Brown test split, the card says so."""
    rc, out, err = run_main(
        train.main, ["--out", tmp_path / "brown", "--corpus", "brown", "--max-steps", "6", "--test-at-end", *LM]
    )
    assert rc == 0, err
    card = json.loads((tmp_path / "brown" / "best" / "card.json").read_text())
    text = json.dumps(card)
    assert "Brown" in text and "English language model" in text and "NOTICE" in text
    assert card["test"]["split"] == "Brown test sentences" and card["test"]["sequences"] > 700
    tok = load_checkpoint(tmp_path / "brown" / "best").tokenizer
    assert "perplexity" in out
    # The tokenizer learned English from Brown sentences, not German from the Ding pairs.
    assert len(tok.encode("The jury said it.").ids) <= 6


@pytest.mark.parametrize(
    "extra, message",
    [
        ([], "English only"),  # a translator
        (["--arch", "decoder-only", "--train-tsv", "x.tsv"], "give one"),
        (["--arch", "decoder-only", "--phrases-per-epoch", "5"], "not --corpus brown"),
    ],
)
def test_the_brown_corpus_refuses_what_it_cannot_do(tmp_path, extra, message):
    rc, _, err = run_main(train.main, ["--out", tmp_path / "x", "--corpus", "brown", *TINY, *extra])
    assert rc == 2 and message in err
    assert not (tmp_path / "x" / "config.json").exists()
