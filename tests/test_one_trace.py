"""One trace for every view (``reading/trace.py``): each view reads it and shows the numbers it showed before.

For tiny random models of every shape the pages show (post-/pre-LN, sinusoidal/learned/RoPE/ALiBi, encoder-decoder
and decoder-only) and the tiny MarianMT and GPT-2 folders, the views that now read :func:`reading.trace.trace_pair`
equal, value for value, the independent computations they replaced (``tests/reference_views.py``): the query·key
view against hooks on every module, the live numbers against the layers re-run by hand, the logit lens against a
decoding stepped with the KV cache, attribution's attention side and the what-if against a layer-by-layer pass.
The trace is made without touching the shared model (no hooks left, no state changed) and is read-only.
"""

from __future__ import annotations

import numpy as np
import pytest
import reference_views as ref
import torch
from test_qk import CONFIGS

from decoding.decoded import decode
from decoding.stepping import Stepper
from reading.attention_scores import read_attention
from reading.lens import logit_lens
from reading.patching import read_outputs
from reading.qk import TENSORS, query_key
from reading.step import Step
from reading.trace import trace_pair
from teaching.live import live_head

ATOL = 1e-6


def _case(model, encode_src, encode_tgt):
    src = encode_src("The cat sleeps.") if model.cfg.is_encoder_decoder else None
    return src, encode_tgt("Die Katze schläft.")[:-1]


def _close(a, b, atol=ATOL) -> bool:
    if a is None or b is None:
        return a is None and b is None
    a, b = (t if isinstance(t, torch.Tensor) else torch.from_numpy(np.array(t)) for t in (a, b))
    if a.dtype == torch.bool:
        return torch.equal(a, b)
    finite = torch.isfinite(b)  # float32 rounding grows with the value: an absolute and a relative tolerance
    return torch.equal(torch.isfinite(a), finite) and torch.allclose(
        a[finite].double(), b[finite].double(), rtol=1e-5, atol=atol
    )


def assert_views_equal_the_references(model, src, tgt) -> int:
    """Every view of ``model`` on ``src`` / ``tgt`` against its reference; returns the number of comparisons."""
    model.eval()
    trace = trace_pair(model, None, src, tgt)
    inputs = ref.layer_inputs(model, src, tgt)
    checked = 0
    for (kind, layer), module_inputs in inputs.items():
        m = trace.module(kind, layer)
        assert _close(m.x_q, module_inputs.x_q) and _close(m.x_kv, module_inputs.x_kv), (kind, layer)
        assert _close(m.mask, module_inputs.mask), (kind, layer)
        for head in range(model.cfg.n_heads):
            live = live_head(model, trace, kind, layer, head)
            expected = ref.live_numbers(model, src, tgt, kind, layer, head)
            for name, value in expected.items():
                assert _close(getattr(live, name), value), (kind, layer, head, name)
            for query in range(m.q.size(1)):
                got, want = (
                    query_key(trace, kind, layer, head, query),
                    ref.query_key(model, module_inputs, kind, layer, head, query),
                )
                for name in TENSORS:
                    assert _close(getattr(got, name), getattr(want, name)), (kind, layer, head, query, name)
                assert (got.slope, got.query_position, got.d_k) == (want.slope, want.query_position, want.d_k)
                checked += 1
    # attribution's attention side and the what-if: the last query of the prefix
    step = Step(src or (), tgt, 3)
    reading, outputs, old = (
        read_attention(model, step),
        read_outputs(model, step),
        ref.last_query_reading(model, src, tgt),
    )
    self_w, self_v = torch.stack(old["self_w"]), torch.stack(old["self_v"])
    assert _close(reading.prefix_weights, self_w) and _close(reading.prefix_norms, self_v.norm(dim=-1), 1e-5)
    assert _close(outputs.self_heads, self_v.sum(dim=2), 1e-5)
    if old["cross_w"]:
        cross_w, cross_v = torch.stack(old["cross_w"]), torch.stack(old["cross_v"])
        assert _close(reading.source_weights, cross_w) and _close(reading.source_norms, cross_v.norm(dim=-1), 1e-5)
        assert _close(reading.source_layer_norms, cross_v.sum(dim=1).norm(dim=-1), 1e-5)
        assert _close(outputs.cross_heads, cross_v.sum(dim=2), 1e-5)
    assert outputs.token_prob == pytest.approx(float(old["probs"][0][3]), abs=1e-6)
    return checked


def assert_lens_equals_the_stepped_decoding(model, src) -> None:
    """The lens read from one trace against the one stepped with the KV cache, on the model's greedy decoding."""
    decoding = decode(Stepper(model, src, max_new_tokens=6))
    src = src if model.cfg.is_encoder_decoder else None
    lens = logit_lens(model, src, decoding.prefix, decoding.generated, k=5)
    stepped = ref.lens_stepwise(model, src, decoding.prefix, decoding.generated)
    assert len(lens.steps) == len(stepped) == len(decoding.generated) > 0
    for step, log_probs in zip(lens.steps, stepped, strict=True):
        chosen = log_probs[:, step.token_id].exp()
        assert torch.allclose(torch.tensor(step.chosen_probs), chosen.float(), atol=1e-5)
        top_p = log_probs.exp().topk(5, dim=-1).values
        assert torch.allclose(torch.tensor(step.top_probs), top_p.float(), atol=1e-5)


@pytest.mark.parametrize("name, overrides", CONFIGS, ids=[c[0] for c in CONFIGS])
def test_every_view_reads_the_trace_and_shows_what_it_showed(make_model, encode_src, encode_tgt, name, overrides):
    model = make_model(**overrides)
    src, tgt = _case(model, encode_src, encode_tgt)
    assert assert_views_equal_the_references(model, src, tgt) >= len(model.cfg.attention_layers()) * 2 * 2


@pytest.mark.parametrize("name, overrides", CONFIGS[:1] + CONFIGS[3:6], ids=[c[0] for c in CONFIGS[:1] + CONFIGS[3:6]])
def test_the_lens_from_the_trace_equals_the_decoding_stepped_with_the_cache(make_model, encode_src, name, overrides):
    model = make_model(**overrides).eval()
    src = encode_src("The cat sleeps.")
    assert_lens_equals_the_stepped_decoding(model, src if model.cfg.is_encoder_decoder else src[:-1])


def test_marian_and_gpt2_views_read_the_trace(hf_models):
    marian, gpt2 = hf_models.marian, hf_models.gpt2
    src = [5, 9, 14, 20, 31, 0]  # Marian: </s> = 0 ends the source; the decoder starts from <pad>
    assert assert_views_equal_the_references(marian, src, [marian.cfg.bos_id, 7, 8, 9]) == 2 * 4 * (6 + 4 + 4)
    assert assert_views_equal_the_references(gpt2, None, [100, 5, 6, 7, 8, 9]) == 2 * 4 * 6
    assert_lens_equals_the_stepped_decoding(marian, src)


def test_the_trace_streams_end_in_the_logits_and_nothing_is_left_on_the_model(make_model, encode_src, encode_tgt):
    model = make_model(norm_first=True).eval()
    src, tgt = _case(model, encode_src, encode_tgt)
    before = {n: p.clone() for n, p in model.state_dict().items()}
    trace = trace_pair(model, None, src, tgt, logits=True)
    n_enc, n_dec = len(model.encoder_layers), len(model.decoder_layers)
    assert trace.streams["encoder"].shape == (n_enc + 1, len(src), model.cfg.d_model)
    assert trace.streams["decoder"].shape == (n_dec + 1, len(tgt), model.cfg.d_model)
    with torch.inference_mode():
        logits = model.logits(model.decoder_norm(trace.streams["decoder"][-1]))
        memory, _ = model.encode(torch.tensor([src]))
        last = model.encoder_norm(trace.streams["encoder"][-1])
    assert torch.allclose(logits, trace.logits, atol=1e-5)
    assert torch.allclose(last, memory[0], atol=1e-5)
    assert all(not mod._forward_hooks and not mod._forward_pre_hooks for mod in model.modules())
    assert all(torch.equal(p, before[n]) for n, p in model.state_dict().items())
    m = trace.module("cross", 1)
    with pytest.raises(RuntimeError):
        m.weights.mul_(2)  # inference tensors: shared by every visitor, they refuse an in-place change
    with pytest.raises(TypeError):
        trace.modules[("cross", 1)] = m  # type: ignore[index]
    with pytest.raises(ValueError, match="no 'self' attention"):
        trace.module("self", 0)
    with pytest.raises(ValueError, match="layer 9 is out of range"):
        trace.module("cross", 9)


def test_a_recorder_needs_the_traced_path(make_model):
    model = make_model().eval()
    module = model.encoder_layers[0].self_attn
    x = torch.zeros(1, 3, model.cfg.d_model)
    with pytest.raises(ValueError, match="traced path"):
        module(x, x, record=lambda r: None)


def test_a_trace_holds_each_number_once(make_model, encode_src, encode_tgt):
    """A room's cache keeps traces: the heatmaps and the modules' weights are one tensor, the scores and the heads'
    sums are computed when read (equal to the module's own: the views above compare them with references), and
    the vocabulary-wide logits are kept only when asked for."""
    model = make_model(norm_first=True).eval()
    src, tgt = _case(model, encode_src, encode_tgt)
    trace = trace_pair(model, None, src, tgt)
    assert trace.logits is None
    for (kind, layer), m in trace.modules.items():
        assert m.weights.untyped_storage().data_ptr() == trace.attention[kind].untyped_storage().data_ptr()
        assert torch.equal(m.weights, trace.attention[kind][layer])
        masked = (m.scores + (m.bias if m.bias is not None else 0)).masked_fill(~m.mask, float("-inf"))
        assert torch.allclose(torch.softmax(masked, dim=-1), m.weights, atol=1e-6), (kind, layer)
        assert m.heads.shape == m.q.shape[:2] + (m.v.size(-1),)
