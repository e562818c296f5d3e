"""reading/: attention beside attribution for one decoding step, on the tiny fixture models.

Each method is checked against what it claims: gradient × input against a finite difference along the input,
integrated gradients against completeness, the value-norm decomposition against the attention module's own
output, the raw weights against the trace; and the reading leaves the shared model exactly as it found it.
"""

from __future__ import annotations

import copy
import dataclasses

import numpy as np
import pytest
import torch

import reading.faithfulness as faithfulness_module
from reading.attention_scores import read_attention, weighted_values
from reading.attribution import METHODS, attribute_step, source_shares
from reading.faithfulness import BATCH_TOKENS, batch_rows, faithfulness, maskable
from reading.gradients import PASS_TOKENS, pass_rows, read_gradients
from reading.step import Step, token_log_probs
from reading.trace import trace_pair

VARIANTS = [(pe, nf) for pe in ("sinusoidal", "learned", "rope", "alibi") for nf in (False, True)]


def make_step(model, step_ids) -> Step:
    src, prefix, token = step_ids
    return Step(src if model.cfg.is_encoder_decoder else (), prefix, token)


@pytest.mark.parametrize("arch", ["encoder-decoder", "decoder-only"])
@pytest.mark.parametrize("pos, norm_first", VARIANTS)
def test_every_method_reads_every_variant(make_model, step_ids, arch, pos, norm_first):
    model = make_model(arch=arch, pos_encoding=pos, norm_first=norm_first)
    step = make_step(model, step_ids)
    result = attribute_step(model, step.src_ids or None, step.prefix_ids, step.token_id, n_steps=8)
    n_src, n_prefix = len(step.src_ids), len(step.prefix_ids)
    for method in METHODS:
        scores = result.scores(method)
        assert scores.source.shape == (n_src,) and scores.prefix.shape == (n_prefix,)
        assert np.isfinite(scores.source).all() and np.isfinite(scores.prefix).all()
        assert scores.prefix_shares.sum() == pytest.approx(1.0)
        if n_src:
            assert scores.source_shares.sum() == pytest.approx(1.0)
    attention = result.scores("attention")
    if n_src:
        assert attention.source.sum() == pytest.approx(1.0, abs=1e-6)  # a mean of softmax rows
        assert 0 < result.source_share < 1
    else:
        assert result.source_share == 0.0
    assert attention.prefix.sum() == pytest.approx(1.0, abs=1e-6)


def test_grad_x_input_matches_a_finite_difference_along_the_input(make_model, step_ids):
    """``Σ e · ∂F/∂e`` is the derivative of ``F((1 + ε) e)`` at ε = 0 (float64, so the difference is exact enough)."""
    model = make_model().double()
    step = make_step(model, step_ids)
    gxi = read_gradients(model, step, n_steps=1).grad_x_input
    src, tgt = step.tensors(model)
    with torch.no_grad():
        emb = (model.embed(src), model.embed(tgt))
        eps = 1e-6
        f = [
            float(token_log_probs(model, src, tgt, step.token_id, tuple(scale * e for e in emb)))
            for scale in (1 + eps, 1 - eps)
        ]
        directional = (f[0] - f[1]) / (2 * eps)
    assert gxi.source.sum() + gxi.prefix.sum() == pytest.approx(directional, rel=1e-5, abs=1e-8)


@pytest.mark.parametrize("arch", ["encoder-decoder", "decoder-only"])
def test_integrated_gradients_is_complete_with_the_default_steps(make_model, step_ids, arch):
    """A smooth (GELU) model: the Gauss–Legendre points integrate its path to well under 1 %."""
    model = make_model(arch=arch, activation="gelu")
    reading = read_gradients(model, make_step(model, step_ids))
    assert reading.completeness_gap <= 0.01
    ig = reading.integrated_gradients
    total = ig.source.sum() + ig.prefix.sum()
    assert total == pytest.approx(reading.log_prob - reading.baseline_log_prob, rel=0.01)


def test_the_gap_of_a_relu_model_is_quadrature_error(make_model, step_ids):
    """ReLU bends the path sharply, so few points miss by a few per cent; many points close the gap, and batching
    the points changes nothing."""
    model = make_model()
    step = make_step(model, step_ids)
    assert read_gradients(model, step, n_steps=512).completeness_gap <= 0.01
    whole = read_gradients(model, step, n_steps=12)
    batched = read_gradients(model, step, n_steps=12, internal_batch_size=5)
    np.testing.assert_allclose(batched.integrated_gradients.source, whole.integrated_gradients.source, atol=1e-5)
    # fewer points a pass than the integral has stretches: the stretches are read a few at a time, same numbers
    one = read_gradients(model, step, n_steps=12, internal_batch_size=1)
    np.testing.assert_allclose(one.integrated_gradients.source, whole.integrated_gradients.source, atol=1e-5)
    np.testing.assert_allclose(one.integrated_gradients.prefix, whole.integrated_gradients.prefix, atol=1e-5)
    assert (one.n_steps, one.evaluated) == (whole.n_steps, whole.evaluated)


def test_every_pass_carries_at_most_the_bounded_rows(make_model, step_ids, monkeypatch):
    """The bound holds for the passes without gradients too (the grid that places the stretches, the midpoints of
    halved ones), not only for the integral's: the grid in one pass held more than a pass with gradients."""
    import reading.gradients as gradients

    model = make_model()
    step = make_step(model, step_ids)
    rows, real = [], gradients.token_log_probs

    def counted(model, src, tgt, token_id, embeddings):
        rows.append(embeddings[0].shape[0])
        return real(model, src, tgt, token_id, embeddings)

    monkeypatch.setattr(gradients, "token_log_probs", counted)
    read_gradients(model, step, n_steps=12, internal_batch_size=3)
    assert max(rows[1:-1]) <= 3 and len(rows) > 10  # the first is grad × input, the last both ends of the path
    rows.clear()
    read_gradients(model, step, n_steps=12)
    assert max(rows) >= gradients.GRID + 1  # unbounded: the grid in one pass


def test_a_pass_of_the_integral_is_bounded_in_token_positions():
    long = Step(tuple(range(128)), tuple(range(64)), 5)  # a sentence at the input cap, 63 tokens written
    assert pass_rows(long) == 1 and pass_rows(long) * 192 <= PASS_TOKENS  # a point at a time
    assert pass_rows(Step(tuple(range(64)), tuple(range(32)), 5)) == 2  # a sentence half as long: two
    assert pass_rows(Step((1, 2, 3), (0,), 5)) == PASS_TOKENS // 4  # a short step: every point of a call at once
    assert pass_rows(long, tokens=100) == 1  # a step longer than the bound still moves, a point at a time
    with pytest.raises(ValueError, match="at least 1"):
        pass_rows(long, tokens=0)


def test_faithfulness_passes_are_bounded_in_token_positions(make_model, step_ids, monkeypatch):
    """A long step's masked variants go through the model a few at a time, with the same probabilities."""
    long = Step(tuple(range(128)), tuple(range(64)), 5)
    assert batch_rows(long) * 192 <= BATCH_TOKENS and batch_rows(Step((1, 2), (0,), 5)) == 64
    model = make_model()
    step = make_step(model, step_ids)
    scores = {"a": np.arange(len(step.src_ids), dtype=float)}
    whole = faithfulness(model, step, scores)
    monkeypatch.setattr(faithfulness_module, "BATCH_TOKENS", len(step.src_ids) + len(step.prefix_ids))  # 1 row
    assert batch_rows(step) == 1
    one = faithfulness(model, step, scores)
    for measure in ("comprehensiveness", "sufficiency"):
        for method, values in getattr(whole, measure).items():
            np.testing.assert_allclose(getattr(one, measure)[method], values, atol=1e-6)


@pytest.mark.parametrize("pos_encoding", ["sinusoidal", "rope"])
def test_the_adaptive_integral_closes_the_gap_where_uniform_points_miss(make_model, step_ids, pos_encoding):
    """The ReLU path's steep stretches: 12 uniform points miss by several per cent; the same budget placed where
    ``F`` changes and refined where the stretches miss ends under 1 % and agrees token by token with a 1,024-point
    integral."""
    model = make_model(pos_encoding=pos_encoding)
    step = make_step(model, step_ids)
    uniform = read_gradients(model, step, n_steps=12, tolerance=None)
    adaptive = read_gradients(model, step, n_steps=12)
    dense = read_gradients(model, step, n_steps=1024, tolerance=None)
    assert uniform.completeness_gap > 0.03 and uniform.n_steps == uniform.evaluated == 12
    assert adaptive.completeness_gap <= 0.01 and 12 <= adaptive.n_steps <= adaptive.evaluated
    change = abs(adaptive.log_prob - adaptive.baseline_log_prob)
    for side in ("source", "prefix"):
        np.testing.assert_allclose(
            getattr(adaptive.integrated_gradients, side), getattr(dense.integrated_gradients, side), atol=0.02 * change
        )
    capped = read_gradients(model, step, n_steps=8, max_steps=16)
    assert capped.n_steps <= 16


def test_the_other_baselines_are_at_hand(make_model, step_ids):
    model = make_model()
    reading = read_gradients(model, make_step(model, step_ids), baseline="zero", n_steps=64)
    assert reading.baseline == "zero" and reading.completeness_gap < 0.05
    pad = read_gradients(model, make_step(model, step_ids), baseline="pad", n_steps=64)
    assert pad.baseline_log_prob != reading.baseline_log_prob  # a baseline of its own
    with pytest.raises(ValueError, match="baseline"):
        read_gradients(model, make_step(model, step_ids), baseline="mean")


def one_hot(n_heads: int, head: int) -> torch.Tensor:
    return torch.nn.functional.one_hot(torch.tensor(head), n_heads).float()


@pytest.mark.parametrize("pos, norm_first", VARIANTS)
@torch.no_grad()
def test_the_value_norm_decomposition_reproduces_each_head(make_model, step_ids, pos, norm_first):
    """``Σ_j α^h_ij f^h(x_j) + b_O`` is the attention module's output for head h alone (the others masked), and
    over all heads its whole output (Kobayashi et al. 2020, eq. 7), in decoder self- and cross-attention."""
    model = make_model(pos_encoding=pos, norm_first=norm_first)
    src, tgt = make_step(model, step_ids).tensors(model)
    memory, _ = model.encode(src)
    x, mask = model.embed_tokens(tgt), model.tgt_mask(tgt)
    positions = torch.arange(tgt.size(1))
    layer = model.decoder_layers[1]
    x, _, _ = model.decoder_layers[0](x, mask, memory, model.src_mask(src), positions=positions)
    h = layer.res_self.norm(x) if norm_first else x
    x_cross, _ = layer.res_self(x, lambda h: layer.self_attn(h, h, mask, positions=positions))
    h_cross = layer.res_cross.norm(x_cross) if norm_first else x_cross
    cases = [
        (layer.self_attn, lambda hm: layer.self_attn(h, h, mask, trace=True, head_mask=hm, positions=positions), h[0]),
        (
            layer.cross_attn,
            lambda hm: layer.cross_attn(h_cross, memory, model.src_mask(src), trace=True, head_mask=hm),
            memory[0],
        ),
    ]
    for module, run, x_kv in cases:
        out, weights = run(None)
        vectors = weighted_values(module, weights[0, :, -1], x_kv)  # [heads, keys, d_model]
        torch.testing.assert_close(vectors.sum(dim=(0, 1)) + module.out_proj.bias, out[0, -1], atol=1e-5, rtol=0)
        for head in range(model.cfg.n_heads):
            alone, _ = run(one_hot(model.cfg.n_heads, head))
            torch.testing.assert_close(vectors[head].sum(0) + module.out_proj.bias, alone[0, -1], atol=1e-5, rtol=0)


@pytest.mark.parametrize("arch", ["encoder-decoder", "decoder-only"])
def test_the_raw_weights_are_the_traces(make_model, tokenizer, step_ids, arch):
    model = make_model(arch=arch, pos_encoding="rope")
    step = make_step(model, step_ids)
    reading = read_attention(model, step)
    trace = trace_pair(model, tokenizer, list(step.src_ids) or None, list(step.prefix_ids))
    own = "cross" if arch == "encoder-decoder" else "self"
    if own == "cross":
        np.testing.assert_allclose(reading.source_weights, trace.attention["cross"][:, :, -1].numpy(), atol=1e-6)
    prefix_kind = "decoder" if arch == "encoder-decoder" else "self"
    np.testing.assert_allclose(reading.prefix_weights, trace.attention[prefix_kind][:, :, -1].numpy(), atol=1e-6)
    layer_head = reading.weights(layer=1, head=2).prefix
    np.testing.assert_allclose(layer_head, trace.attention[prefix_kind][1, 2, -1].numpy(), atol=1e-6)
    norms = reading.norms(layer=0, head=1)
    np.testing.assert_allclose(norms.prefix, reading.prefix_norms[0, 1])
    with pytest.raises(IndexError):
        reading.weights(layer=5)


def test_the_model_is_left_as_it_was(make_model, step_ids):
    """No parameter, ``requires_grad`` flag, ``.grad``, hook or mode changes; inside inference mode too."""
    model = make_model()
    model.encoder_layers[0].ffn.linear1.weight.requires_grad_(False)  # a flag that differs from the others
    before = {n: (p.detach().clone(), p.requires_grad) for n, p in model.named_parameters()}
    step = make_step(model, step_ids)
    attribute_step(model, step.src_ids, step.prefix_ids, step.token_id, n_steps=4)
    with torch.inference_mode():
        attribute_step(model, step.src_ids, step.prefix_ids, step.token_id, n_steps=4)
    for name, p in model.named_parameters():
        assert torch.equal(p, before[name][0]) and p.requires_grad == before[name][1] and p.grad is None, name
    hooks = ("_forward_hooks", "_forward_pre_hooks", "_backward_hooks", "_backward_pre_hooks")
    assert not any(getattr(m, h) for m in model.modules() for h in hooks)
    assert not model.training


def test_results_are_frozen(make_model, step_ids):
    model = make_model()
    step = make_step(model, step_ids)
    result = attribute_step(model, step.src_ids, step.prefix_ids, step.token_id, n_steps=4)
    with pytest.raises(dataclasses.FrozenInstanceError):
        result.step = None
    for array in (result.scores("integrated_gradients").source, result.attention.source_norms):
        with pytest.raises(ValueError):
            array[0] = 1.0


def test_a_step_that_does_not_fit_is_refused(make_model, step_ids):
    model = make_model()
    src, prefix, token = step_ids
    with pytest.raises(ValueError, match="source"):
        attribute_step(model, None, prefix, token)
    with pytest.raises(ValueError, match="no source"):
        attribute_step(make_model(arch="decoder-only"), src, prefix, token)
    training = copy.deepcopy(model).train()
    with pytest.raises(ValueError, match="eval"):
        attribute_step(training, src, prefix, token)


def test_source_shares_gives_one_value_per_step(make_model, step_ids):
    model = make_model()
    src, prefix, token = step_ids
    shares = source_shares(model, src, list(prefix[1:]) + [token], n_steps=4)
    assert len(shares) == len(prefix) and all(0 < s < 1 for s in shares)


def leave_one_out(model, step: Step) -> np.ndarray:
    """The drop of ``p(y)`` with each maskable token alone replaced by ``<unk>`` (0 for the others)."""
    ids = step.src_ids if model.cfg.is_encoder_decoder else step.prefix_ids
    drops = np.zeros(len(ids))
    for i in maskable(model, step):
        masked = tuple(model.cfg.unk_id if j == i else t for j, t in enumerate(ids))
        other = Step(masked, step.prefix_ids, step.token_id) if step.src_ids else Step((), masked, step.token_id)
        drops[i] = faithfulness(model, other, {}, n_random=0).probability
    full = faithfulness(model, step, {}, n_random=0).probability
    return np.where(np.isin(np.arange(len(ids)), maskable(model, step)), full - drops, 0.0)


@pytest.mark.parametrize("arch", ["encoder-decoder", "decoder-only"])
def test_a_ranking_that_knows_the_important_token_beats_random(make_model, encode_src, encode_tgt, arch):
    """The constructed case: the oracle ranks tokens by how much masking each alone drops p(y), so its first token
    is the truly important one; it must beat the random rankings, which must beat the oracle reversed."""
    model = make_model(arch=arch)
    src = encode_src("My father works and my mother cooks.")
    prefix = encode_tgt("Mein Vater arbeitet und meine Mutter kocht.")[:-2]
    step = Step(src if arch == "encoder-decoder" else (), prefix[:-1], prefix[-1])
    oracle = leave_one_out(model, step)
    fractions = (0.01, 0.2, 0.5)  # the first is one token
    result = faithfulness(model, step, {"oracle": oracle, "reverse": -oracle}, fractions=fractions)
    assert result.counts[0] == 1 and result.comprehensiveness["oracle"][0] == pytest.approx(oracle.max(), abs=1e-6)
    comp = {m: result.aopc("comprehensiveness", m) for m in ("oracle", "random", "reverse")}
    assert comp["oracle"] > comp["random"] > comp["reverse"], comp
    again = faithfulness(model, step, {"oracle": oracle}, fractions=fractions)
    assert again.comprehensiveness["random"] == result.comprehensiveness["random"]  # seeded


def test_faithfulness_takes_every_methods_scores(make_model, step_ids):
    model = make_model()
    step = make_step(model, step_ids)
    attribution = attribute_step(model, step.src_ids, step.prefix_ids, step.token_id, n_steps=4)
    result = faithfulness(model, step, attribution.all_scores(), n_random=3)
    assert set(result.comprehensiveness) == set(METHODS) | {"random"}
    assert 0 < result.probability < 1
    for method in result.sufficiency:
        assert -1 <= result.aopc("sufficiency", method) <= 1
    with pytest.raises(TypeError):
        result.comprehensiveness["random"] = (0.0,)
    with pytest.raises(ValueError, match="random"):
        faithfulness(model, step, {"random": attribution.scores("attention")})
    with pytest.raises(ValueError, match="scores for"):
        faithfulness(model, step, {"short": np.zeros(2)})
    with pytest.raises(ValueError, match="fractions"):
        faithfulness(model, step, {}, fractions=(0.0,))


@pytest.mark.parametrize("arch", ["encoder-decoder", "decoder-only"])
def test_given_token_embeddings_compute_what_the_ids_do(make_model, step_ids, arch):
    """``token_embeddings`` (what the gradients are taken against) replace ``embed(ids)`` and nothing else."""
    model = make_model(arch=arch, pos_encoding="learned")
    step = make_step(model, step_ids)
    src, tgt = step.tensors(model)
    with torch.no_grad():
        logits = model(src, tgt)[:, -1].log_softmax(-1)[:, step.token_id]
        given = token_log_probs(
            model, src, tgt, step.token_id, tuple(model.embed(ids) for ids in (src, tgt) if ids is not None)
        )
        from_ids = token_log_probs(model, src, tgt, step.token_id)
    torch.testing.assert_close(given, logits)
    torch.testing.assert_close(from_ids, logits)


def test_the_benchmark_prints_both_tables(make_model, tokenizer, tmp_path, capsys):
    """``python -m benchmarks.attribution`` end to end on the tiny model (how fast is not checked here)."""
    from benchmarks import attribution as bench
    from model.checkpoint import save_checkpoint

    save_checkpoint(tmp_path / "tiny", make_model(), tokenizer)
    assert (
        bench.main(
            ["--checkpoint", str(tmp_path / "tiny"), "--n", "2", "--repeats", "1", "--n-steps", "4", "--n-random", "2"]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "one step, every method" in out and "Faithfulness over 2 sentences" in out
    assert all(f"| {m} " in out for m in METHODS)


@pytest.mark.parametrize("family", ["marian", "gpt2"])
def test_hugging_face_models_are_read_too(tmp_path, family):
    """MarianMT (decoder starts from <pad>, SiLU, a logits bias) and GPT-2 (no embedding scale, learned positions)
    run through our modules, so every method and the faithfulness measures read them."""
    pytest.importorskip("transformers")
    from hf_fixtures import write_tiny_gpt2_model, write_tiny_marian_model

    from model.hf.loader import load_hf_model

    (write_tiny_marian_model if family == "marian" else write_tiny_gpt2_model)(tmp_path)
    model, cfg, _ = load_hf_model(tmp_path)
    src = (5, 9, 14, 20, 31, cfg.eos_id) if cfg.is_encoder_decoder else ()
    step = Step(src, (cfg.bos_id, 7, 8), 11)
    result = attribute_step(model, src, step.prefix_ids, step.token_id, n_steps=8)
    assert all(np.isfinite(result.scores(m).prefix).all() for m in METHODS)
    assert result.scores("attention").prefix.sum() == pytest.approx(1.0, abs=1e-6)
    faith = faithfulness(model, step, result.all_scores(), n_random=2)
    assert set(faith.comprehensiveness) == set(METHODS) | {"random"}
