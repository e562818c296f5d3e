"""What a visitor may send has a stated cap, kept in one place (``ui/limits.py``), and what a page computes from it
for the whole room goes through the gate for heavy work and comes back as a value nobody can change."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

pytest.importorskip("streamlit")
from streamlit.testing.v1 import AppTest

from serving import heavy
from ui.limits import DEMO_MAX_CHARS, DEMO_TRAIN_TEXT_CHARS, TRAIN_TEXT_CHARS, UPLOAD_MB, limits

ROOT = Path(__file__).resolve().parent.parent
TOKENIZATION = ROOT / "app_pages" / "tokenization" / "tokenization.py"
needs_ckpt = pytest.mark.skipif(
    not (ROOT / "checkpoints" / "en-de" / "model.safetensors").is_file(), reason="checkpoints/en-de is missing"
)


@pytest.fixture(autouse=True)
def _at_repo_root(monkeypatch):
    monkeypatch.chdir(ROOT)
    monkeypatch.delenv("ATTENTION_EXPLORER_CHECKPOINTS", raising=False)
    monkeypatch.delenv("ATTENTION_EXPLORER_DEMO", raising=False)


def open_page(page: str, query: dict[str, str] | None = None) -> AppTest:
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=90)
    for key, value in (query or {}).items():
        at.query_params[key] = value
    at.switch_page(f"app_pages/{page}/{page}.py")
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def test_the_caps_are_stated_in_one_place(monkeypatch):
    assert limits().train_text_chars == TRAIN_TEXT_CHARS and limits().upload_mb == UPLOAD_MB
    monkeypatch.setenv("ATTENTION_EXPLORER_DEMO", "1")
    assert limits().train_text_chars == DEMO_TRAIN_TEXT_CHARS < TRAIN_TEXT_CHARS
    assert limits().max_chars == DEMO_MAX_CHARS


def test_the_tokenization_page_keeps_no_caps_of_its_own():
    """It kept 2,000 and 20,000 in constants of its own, which the hosted demo's switch did not reach."""
    source = TOKENIZATION.read_text(encoding="utf-8")
    assert "2000\n" not in source and "20000" not in source and "MAX_CHARS" not in source
    assert "limits()" in source


@needs_ckpt
def test_the_hosted_demo_caps_the_tokenization_text(monkeypatch):
    monkeypatch.setenv("ATTENTION_EXPLORER_DEMO", "1")
    at = open_page("tokenization")
    at.text_area(key="tk_text").set_value("word " * 100).run()  # 500 characters: over the demo's 300
    assert not at.exception
    assert any(f"up to {DEMO_MAX_CHARS}" in w.value for w in at.warning), [w.value for w in at.warning]
    at = open_page("tokenization", {"train_text": "a cat\n" * 1000})
    notes = " ".join(str(i.value) for i in at.info)
    assert f"only the first {DEMO_TRAIN_TEXT_CHARS:,} are used" in notes, notes


@needs_ckpt
def test_bpe_training_goes_through_the_gate_and_comes_back_frozen():
    text = "a cat sat\na hat sat\na bat sat on a mat"  # a text no other test trains on
    at = open_page("tokenization", {"train_text": text, "vocab": "45"})
    assert not at.warning, [w.value for w in at.warning]
    key = ("bpe-train", text, 45)
    assert heavy.GATE.cached(key)
    trained = heavy.GATE.run(key, lambda: pytest.fail("trained a second time"))
    assert isinstance(trained.merges, tuple) and all(isinstance(m, tuple) for m in trained.merges)
    assert isinstance(trained.first, tuple) and trained.first_line == "a cat sat"
    with pytest.raises(dataclasses.FrozenInstanceError):
        trained.vocab_size = 1
    assert any(f"Learned **{len(trained.merges)}** merges" in m.value for m in at.markdown)


@needs_ckpt
def test_the_upload_box_states_its_cap():
    at = open_page("training")
    boxes = [e for e in at.get("file_uploader")]
    assert boxes, "the training form has no upload box"
    for box in boxes:
        assert box.proto.max_upload_size_mb == UPLOAD_MB
        assert f"up to {UPLOAD_MB} MB" in box.proto.label
