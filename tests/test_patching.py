"""reading/patching.py: a step read with some input ids changed, on the tiny fixture models.

The distribution must be the model's own (the same log-probabilities as :func:`reading.step.token_log_probs`), the
heads' outputs must add up to what each attention module gives the residual stream, an unchanged step must change
nothing, and masking a word must change the cross-attention heads that read it.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from reading.patching import masked, read_outputs, what_if
from reading.step import Step, token_log_probs

VARIANTS = [("sinusoidal", False), ("rope", True), ("alibi", True), ("learned", False)]


def step_of(model, step_ids) -> Step:
    src, prefix, token = step_ids
    if model.cfg.is_encoder_decoder:
        return Step(src, prefix, token)
    return Step((), tuple(prefix) + tuple(src[:-1]), token)


@pytest.mark.parametrize("arch", ["encoder-decoder", "decoder-only"])
@pytest.mark.parametrize("pos, norm_first", VARIANTS)
def test_the_distribution_is_the_models_and_the_heads_add_up(make_model, step_ids, arch, pos, norm_first):
    model = make_model(arch=arch, pos_encoding=pos, norm_first=norm_first)
    step = step_of(model, step_ids)
    out = read_outputs(model, step, k=5)
    src, tgt = step.tensors(model)
    with torch.inference_mode():
        log_p = token_log_probs(model, src, tgt, step.token_id)
    assert out.token_prob == pytest.approx(float(log_p.exp()), abs=1e-6)
    assert list(out.top_probs) == sorted(out.top_probs, reverse=True) and len(out.top_ids) == 5
    n_layers, n_heads, d = len(model.decoder_layers), model.cfg.n_heads, model.cfg.d_model
    assert out.self_heads.shape == (n_layers, n_heads, d)
    assert out.cross_heads.shape == ((n_layers, n_heads, d) if arch == "encoder-decoder" else (n_layers, n_heads, 0))
    # the first layer's self-attention output, from the module itself: Σ_h o^h + b_O
    with torch.inference_mode():
        x = model.embed_tokens(tgt)
        layer = model.decoder_layers[0]
        h = layer.res_self.norm(x) if layer.res_self.norm_first else x
        whole, _ = layer.self_attn(h, h, model.tgt_mask(tgt), trace=True, positions=torch.arange(tgt.size(1)))
    np.testing.assert_allclose(
        out.self_heads[0].sum(0) + layer.self_attn.out_proj.bias.detach().numpy(), whole[0, -1].numpy(), atol=1e-5
    )


def test_an_unchanged_step_changes_nothing_and_a_masked_word_moves_the_cross_heads(make_model, step_ids):
    model = make_model(arch="encoder-decoder")
    step = step_of(model, step_ids)
    same = what_if(model, step, step)
    assert not same.self_change.any() and not same.cross_change.any()
    assert same.before.top_ids == same.after.top_ids
    changed = Step(masked(step.src_ids, [1], model.cfg.unk_id), step.prefix_ids, step.token_id)
    result = what_if(model, step, changed)
    assert result.cross_change.shape == (2, 4) and (result.cross_change > 0).all()
    assert result.after.token_prob != pytest.approx(result.before.token_prob, abs=1e-9)
    assert changed.src_ids[1] == model.cfg.unk_id and changed.src_ids[0] == step.src_ids[0]


def test_a_replacement_may_change_the_length_and_the_model_is_left_as_it_was(make_model, step_ids, encode_src):
    model = make_model(arch="decoder-only")
    step = step_of(model, step_ids)
    longer = Step((), step.prefix_ids[:3] + tuple(encode_src("The big house is very big.")[:-1]), step.token_id)
    params = {n: p.clone() for n, p in model.named_parameters()}
    result = what_if(model, step, longer)
    assert result.cross_change.shape == (2, 0) and result.self_change.shape == (2, 4)
    assert not model.training and all(torch.equal(p, params[n]) for n, p in model.named_parameters())
    with pytest.raises(ValueError):
        result.self_change[0, 0] = 1.0  # shared results refuse writes
    with pytest.raises(ValueError):
        read_outputs(model, step, k=0)


@pytest.mark.parametrize("arch", ["encoder-decoder", "decoder-only"])
def test_the_attributions_last_query_stands_in_for_tracing_the_step_again(make_model, step_ids, arch, monkeypatch):
    from reading import attribution, patching

    model = make_model(arch=arch)
    step = step_of(model, step_ids)
    reading = attribution.attribute_step(model, step.src_ids, step.prefix_ids, step.token_id, n_steps=4)
    changed = Step(step.src_ids, step.prefix_ids[:-1] + (model.cfg.unk_id,), step.token_id)
    traced = what_if(model, step, changed)
    passes = []
    real = patching.trace_pair
    monkeypatch.setattr(patching, "trace_pair", lambda *a, **k: passes.append(a[3]) or real(*a, **k))
    given = what_if(model, step, changed, last=reading.last)
    assert passes == [list(changed.prefix_ids)]  # only the changed step is traced
    for name in ("self_heads", "cross_heads"):
        np.testing.assert_allclose(getattr(given.before, name), getattr(traced.before, name), atol=1e-6)
    assert given.before.top_ids == traced.before.top_ids and given.before.token_prob == traced.before.token_prob
    np.testing.assert_allclose(given.self_change, traced.self_change, atol=1e-6)
    assert reading.last.self_heads.nbytes * 8 <= traced.before.self_heads.nbytes  # kept small beside the reading
    with pytest.raises(ValueError, match="kept 10 next tokens"):
        what_if(model, step, changed, k=3, last=reading.last)
