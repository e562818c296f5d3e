"""The Stepper API (back / step / goto / reset, the end of a decoding, its cap) and the KV cache: its size, its rows
reordered for beam search."""

from __future__ import annotations

import pytest
import torch
from test_transformer import ATOL, non_special, random_ids

from decoding.stepping import Stepper
from model.transformer import KVCache


# --- Stepper API --------------------------------------------------------------------------------------------------
def test_stepper_back_step_goto_reset(make_model):
    model = make_model()
    src = random_ids(6, model.cfg.vocab_size, 40).tolist() + [2]
    st = Stepper(model, src, max_new_tokens=10)
    reference = Stepper(model, src, max_new_tokens=10)
    reference.run_to_end(non_special)
    assert len(reference.records) == 10

    for _ in range(5):
        st.step(non_special)
    st.back()
    assert len(st.records) == 4 and st.tokens == reference.tokens[:5]
    assert st.cache.positions == 4
    redo = st.step(non_special)
    assert redo.token_id == reference.records[4].token_id
    torch.testing.assert_close(redo.log_probs, reference.records[4].log_probs, atol=ATOL, rtol=0)
    torch.testing.assert_close(redo.cross_attention, reference.records[4].cross_attention, atol=ATOL, rtol=0)

    # back to the very start, then forward again
    for _ in range(5):
        st.back()
    assert st.records == [] and st.tokens == [model.cfg.bos_id] and st.cache.positions == 0
    st.back()  # no-op when nothing to undo
    assert st.tokens == [model.cfg.bos_id]
    first = st.step(non_special)
    torch.testing.assert_close(first.log_probs, reference.records[0].log_probs, atol=ATOL, rtol=0)

    st.goto(7, non_special)
    assert len(st.records) == 7 and st.tokens == reference.tokens[:8]
    torch.testing.assert_close(st.records[-1].log_probs, reference.records[6].log_probs, atol=ATOL, rtol=0)
    st.goto(2, non_special)
    assert len(st.records) == 2 and st.tokens == reference.tokens[:3] and st.cache.positions == 2
    st.goto(50, non_special)  # stops at max_new_tokens
    assert len(st.records) == 10 and st.finished and st.step(non_special) is None
    assert st.tokens == reference.tokens

    st.reset()
    assert st.records == [] and st.tokens == [model.cfg.bos_id] and st.generated == []
    assert st.cache.positions == 0 and st.cache.nbytes()["total"] == 0 and not st.finished


def test_stepper_stops_at_eos_and_output_ids_drop_it(make_model):
    model = make_model()
    st = Stepper(model, [5, 6, 2], max_new_tokens=10)
    choices = iter([7, 8, model.cfg.eos_id])
    st.run_to_end(lambda lp: next(choices))
    assert st.generated == [7, 8, model.cfg.eos_id]
    assert st.output_ids() == [7, 8] and st.finished


def test_stepper_max_new_tokens_capped_by_max_len(make_model):
    model = make_model(max_len=12)
    st = Stepper(model, [5, 6, 2], prefix_ids=[1, 9, 9])
    assert st.max_new_tokens == 12 - 3
    st.run_to_end(non_special)
    assert len(st.tokens) == 12  # never more positions than the model has


# --- KV cache size ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("arch", ["encoder-decoder", "decoder-only"])
def test_kv_cache_nbytes(make_model, arch):
    model = make_model(arch=arch)
    cfg = model.cfg
    layers, heads, d_k = cfg.n_decoder_layers, cfg.n_heads, cfg.d_k
    src = [5, 6, 7, 8, 2]
    st = Stepper(model, src if arch == "encoder-decoder" else None, max_new_tokens=20)
    for n in range(1, 7):
        rec = st.step(non_special)
        sizes = st.cache.nbytes()
        assert sizes["self"] == layers * heads * d_k * n * 2 * 4
        expected_cross = layers * heads * d_k * len(src) * 2 * 4 if arch == "encoder-decoder" else 0
        assert sizes["cross"] == expected_cross
        assert sizes["total"] == sizes["self"] + sizes["cross"] == rec.cache_bytes
    st.back()
    assert st.cache.nbytes()["self"] == layers * heads * d_k * 5 * 2 * 4


def test_kv_cache_select_reorders_rows(make_model):
    model = make_model()
    src = torch.tensor([[5, 6, 7, 2], [8, 9, 10, 2]])
    with torch.no_grad():
        memory, _ = model.encode(src)
        cache = model.new_cache()
        model.decode(torch.tensor([[1], [1]]), memory, model.src_mask(src), cache=cache)
        k_before = cache.self_attn[0].k.clone()
        cross_before = cache.cross_attn[0].k.clone()
        cache.select(torch.tensor([1, 1, 0]))
    assert torch.equal(cache.self_attn[0].k, k_before[[1, 1, 0]])
    assert torch.equal(cache.cross_attn[0].k, cross_before[[1, 1, 0]])
    assert isinstance(cache, KVCache) and cache.positions == 1
