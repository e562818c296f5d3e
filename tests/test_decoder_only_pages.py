"""Every page with a decoder-only (GPT-style) checkpoint: no cross-attention anywhere, never a traceback."""

from pathlib import Path

import pytest
import torch
from streamlit.testing.v1 import AppTest

from model.checkpoint import load_checkpoint, save_checkpoint
from model.config import ModelConfig
from model.transformer import Transformer

ROOT = Path(__file__).resolve().parent.parent
PAGES = ["translate", "attention", "decoding", "positional", "tokenization", "lecture"]
ATTENTION_TABS = ["Heads", "Tokens & lines", "Model grid", "Summaries", "Head statistics", "Ablation", "Compare"]


@pytest.fixture(scope="module")
def lm_root(tmp_path_factory):
    """A tiny random decoder-only checkpoint that shares the shipped tokenizer."""
    root = tmp_path_factory.mktemp("lm")
    shipped = load_checkpoint(ROOT / "checkpoints" / "en-de")
    cfg = ModelConfig(
        arch="decoder-only",
        vocab_size=shipped.config.vocab_size,
        d_model=32,
        n_heads=2,
        n_encoder_layers=0,
        n_decoder_layers=2,
        d_ff=64,
    )
    torch.manual_seed(0)
    save_checkpoint(root / "tiny-lm", Transformer(cfg).eval(), shipped.tokenizer, {"task": "test language model"})
    return root


def open_page(monkeypatch, lm_root, page: str) -> AppTest:
    monkeypatch.chdir(ROOT)
    monkeypatch.setenv("ATTENTION_EXPLORER_CHECKPOINTS", str(lm_root))
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=90)
    at.query_params["ckpt"] = "tiny-lm"
    at.run()
    at.switch_page(f"app_pages/{page}/{page}.py").run()
    assert not at.exception, at.exception[0].message
    return at


@pytest.mark.parametrize("page", PAGES)
def test_page_renders_with_a_decoder_only_checkpoint(monkeypatch, lm_root, page):
    at = open_page(monkeypatch, lm_root, page)
    nxt = [b for b in at.button if b.label == "Next"]
    if nxt:  # step twice: the continuation of the prompt, with self-attention instead of cross-attention
        nxt[0].click().run()
        [b for b in at.button if b.label == "Next"][0].click().run()
        assert not at.exception, at.exception[0].message
    if page == "translate":
        assert any("Masked self-attention of step 2" in m.value for m in at.markdown)


def test_attention_tabs_with_a_decoder_only_checkpoint(monkeypatch, lm_root):
    at = open_page(monkeypatch, lm_root, "attention")
    assert at.radio(key="at_kind").options == ["Self (masked)"]
    for tab in ATTENTION_TABS:
        at.session_state["at_tab"] = tab
        at.run()
        assert not at.exception, (tab, at.exception[0].message)


@pytest.mark.parametrize(
    "page, preset_key, text_key", [("translate", "tr_text_preset", "tr_text"), ("decoding", "dl_text_preset", None)]
)
def test_a_language_model_gets_prompts_to_continue(monkeypatch, lm_root, page, preset_key, text_key):
    """Finished sentences make a sentence-level LM stop at once: its presets are openings, its box a prompt."""
    from ui.state import LM_PRESETS

    at = open_page(monkeypatch, lm_root, page)
    assert at.selectbox(key=preset_key).options[1:] == LM_PRESETS
    assert at.session_state["app_text"] == LM_PRESETS[0]
    box = at.text_input(key=text_key or "dl_text")
    assert box.label.startswith("English prompt") and box.value == LM_PRESETS[0]
    if page == "translate":
        assert "language model" in at.caption[0].value and "English → German" not in at.caption[0].value


def test_a_prompt_at_the_length_limit_still_leaves_room_to_continue(monkeypatch, lm_root):
    """A translator's encoder reads max_len tokens; a decoder-only prompt is cut shorter, because prompt and
    continuation share the positions (a full-length prompt gave 'Step 0 of 0' with a dead Next button)."""
    from decoding.stepping import MIN_CONTINUATION, input_limit

    monkeypatch.chdir(ROOT)
    monkeypatch.setenv("ATTENTION_EXPLORER_CHECKPOINTS", str(lm_root))
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=90)
    at.query_params["ckpt"] = "tiny-lm"
    at.query_params["text"] = "word " * 300
    at.run()
    assert not at.exception, at.exception[0].message
    cfg = load_checkpoint(lm_root / "tiny-lm").config
    assert input_limit(cfg) == cfg.max_len - MIN_CONTINUATION
    assert any(f"limit of {input_limit(cfg)} tokens" in i.value for i in at.info)
    nxt = [b for b in at.button if b.label == "Next"][0]
    assert not nxt.disabled
    nxt.click().run()
    assert not at.exception and any("Masked self-attention of step 1" in m.value for m in at.markdown)
