"""What the server shares is what a fresh computation gives: a visitor sees the same numbers as before sharing.

The pages read decodings and traces computed once and shared by every session (:mod:`serving.heavy`); these tests
compare each shared value with the same computation done afresh here, value for value, and the numbers a page
prints with the fresh ones.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

pytest.importorskip("streamlit")
from streamlit.testing.v1 import AppTest

from decoding.stepping import Stepper, input_limit, prepare_source, strip_eos
from model.checkpoint import load_checkpoint
from model.config import default_max_new_tokens
from reading.trace import trace_pair
from serving import heavy
from ui import state

ROOT = Path(__file__).resolve().parent.parent
CKPT = ROOT / "checkpoints" / "en-de"
pytestmark = pytest.mark.skipif(not (CKPT / "model.safetensors").is_file(), reason="checkpoints/en-de is missing")
TEXT = "The cat sat on the mat."


@pytest.fixture(scope="module")
def ckpt():
    return load_checkpoint(CKPT)


def source(ckpt, text=TEXT):
    cfg = ckpt.config
    return prepare_source(ckpt.tokenizer, text, input_limit(cfg), cfg.eos_id, cfg.unk_id)


def fresh_stepper(ckpt, src) -> Stepper:
    stepper = Stepper(ckpt.model, src.ids, max_new_tokens=default_max_new_tokens(ckpt.config, len(src.ids)))
    stepper.run_to_end()
    return stepper


def test_the_shared_decoding_equals_a_fresh_one_and_is_computed_once(ckpt, monkeypatch):
    gate = heavy.Gate()
    monkeypatch.setattr(heavy, "GATE", gate)
    src = source(ckpt)
    shared = state.greedy_run(ckpt, src)
    again = state.greedy_run(ckpt, source(ckpt))  # another visitor, the same sentence
    assert again is shared and gate.computed == 1
    fresh = fresh_stepper(ckpt, src)
    assert list(shared.generated) == fresh.generated
    for mine, theirs in zip(shared.records, fresh.records, strict=True):
        assert mine.token_id == theirs.token_id and mine.prob == theirs.prob
        assert mine.log_probs is None  # shared slim: the top tokens, the chosen and the banned ones, no [vocab] row
        assert all(value == float(theirs.log_probs[t]) for t, value in mine.kept)
        assert torch.equal(mine.cross_attention, theirs.cross_attention)
        assert torch.equal(mine.self_attention, theirs.self_attention)
        p, i = theirs.log_probs.exp().topk(10)
        assert mine.top(10) == (i.tolist(), p.tolist())  # the list kept at decoding time is the one computed now


def test_the_shared_trace_equals_a_fresh_forward_pass(ckpt, monkeypatch):
    monkeypatch.setattr(heavy, "GATE", heavy.Gate())
    src = source(ckpt)
    tgt = strip_eos(list(state.greedy_run(ckpt, src).tokens), ckpt.config.eos_id)
    raw, shown = state.traced(ckpt, src, tgt)
    fresh = trace_pair(ckpt.model, ckpt.tokenizer, src.ids, tgt, src.offsets)
    assert raw.attention.keys() == fresh.attention.keys()
    for kind in fresh.attention:
        assert torch.equal(raw.attention[kind], fresh.attention[kind])
        assert shown.attention[kind] is raw.attention[kind]  # the shown copy shares the tensors
    assert raw.src_ids == tuple(src.ids) and raw.tgt_tokens == tuple(fresh.tgt_tokens)
    with pytest.raises(TypeError):
        raw.attention["cross"] = None  # a read-only mapping: nobody can swap a kind out for everyone


def test_the_translate_page_prints_the_fresh_numbers(ckpt):
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120)
    at.query_params["text"] = TEXT
    at.query_params["step"] = "2"
    at.run()
    assert not at.exception
    fresh = fresh_stepper(ckpt, source(ckpt)).records[1]
    caption = next(c.value for c in at.caption if c.value.startswith("Chosen:"))
    assert re.search(rf"p = {fresh.prob:.3f}\b", caption), caption
