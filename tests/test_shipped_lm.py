"""The shipped language model ``checkpoints/brown-lm``: a decoder-only Transformer trained on the Brown corpus.

It loads as decoder-only from safetensors, its card says what it was trained and tested on, its perplexity on
Brown test sentences is that of a trained model (a random one sits near the vocabulary size), different prompts
get different continuations, and the app opens on it with the language-model presets.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from corpora.brown import brown_path, read_lines
from decoding.stepping import Stepper, prepare_source
from evaluation.evaluate import language_model_scores
from model.checkpoint import load_checkpoint
from ui.state import LM_PRESETS

ROOT = Path(__file__).resolve().parent.parent
FOLDER = ROOT / "checkpoints" / "brown-lm"


@pytest.fixture(scope="module")
def lm():
    return load_checkpoint(FOLDER)


def test_it_is_a_decoder_only_model_with_a_card(lm):
    cfg, card = lm.config, lm.card
    assert cfg.arch == "decoder-only" and cfg.n_encoder_layers == 0 and len(lm.model.encoder_layers) == 0
    assert "Brown" in card["data"]["train"] and (ROOT / card["data"]["notice"]).is_file()
    assert card["test"]["split"] == "Brown test sentences" and card["test"]["perplexity"] > 1
    assert card["valid"]["perplexity"] == pytest.approx(math.exp(card["valid"]["loss"]), rel=1e-3)
    assert card["parameters"] == sum(p.numel() for p in lm.model.parameters())


def test_its_test_perplexity_is_the_one_on_its_card(lm):
    """Recomputed on the shipped Brown test split: the weights, tokenizer and card belong together."""
    scores = language_model_scores(lm, read_lines(brown_path("test")))
    assert scores["sequences"] == lm.card["test"]["sequences"]
    assert scores["perplexity"] == pytest.approx(lm.card["test"]["perplexity"], rel=0.01)
    assert scores["perplexity"] < lm.config.vocab_size / 20  # a uniform guess scores the vocabulary size


def test_it_continues_each_prompt_its_own_way(lm):
    cfg = lm.config
    outputs = []
    for prompt in LM_PRESETS[:3]:
        src = prepare_source(lm.tokenizer, prompt, cfg.max_len, cfg.eos_id, cfg.unk_id)
        stepper = Stepper(lm.model, src.ids, max_new_tokens=12)
        stepper.run_to_end()
        assert stepper.tokens[: len(src.ids)] == [cfg.bos_id, *src.ids[:-1]]  # the prompt, then the continuation
        outputs.append(lm.tokenizer.decode(stepper.output_ids()))
    assert all(o.strip() for o in outputs) and len(set(outputs)) == len(outputs), outputs


def test_the_app_opens_on_it(monkeypatch):
    monkeypatch.chdir(ROOT)
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=90)
    at.query_params["ckpt"] = "brown-lm"
    at.run()
    assert not at.exception, at.exception[0].message
    assert at.sidebar.selectbox(key="app_ckpt").value == "brown-lm"
    assert at.text_input(key="tr_text").value == LM_PRESETS[0]
    banner = [m.value for m in at.markdown if "border-left:6px" in m.value]
    assert len(banner) == 1 and LM_PRESETS[0] in banner[0]  # the continuation follows its greyed prompt
    pieces = [m.value for m in at.markdown if "bos&gt;" in m.value]  # step 0: what the decoder is fed
    assert len(pieces) == 1 and "eos&gt;" not in pieces[0]
    [b for b in at.button if b.label == "Next"][0].click().run()
    assert not at.exception, at.exception[0].message
    assert any("Masked self-attention of step 1" in m.value for m in at.markdown)


def test_the_attention_page_calls_it_a_continuation(monkeypatch):
    monkeypatch.chdir(ROOT)
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=90)
    at.query_params["ckpt"] = "brown-lm"
    at.run()
    at.switch_page("app_pages/attention/attention.py").run()
    assert not at.exception, at.exception[0].message
    assert any(m.value.startswith("**Continuation:**") for m in at.markdown)
    assert not any(m.value.startswith("**Translation:**") for m in at.markdown)
