"""The Transformer: cached decoding == full recompute, causality, padding invariance, overfitting a few pairs,
masks, embeddings and suppressed ids. The Stepper API and the KV cache: ``test_stepper.py``."""

from __future__ import annotations

import itertools

import pytest
import torch
import torch.nn.functional as F

from decoding.batched import greedy_batch, translate_texts
from decoding.stepping import Stepper
from model.transformer import Transformer, causal_mask
from reading.trace import trace_pair

ATOL = 1e-5
VARIANTS = [
    dict(arch=arch, norm_first=nf, pos_encoding=pos)
    for arch, nf, pos in itertools.product(
        ("encoder-decoder", "decoder-only"), (False, True), ("sinusoidal", "learned", "rope", "alibi")
    )
]
VARIANT_IDS = [f"{v['arch']}-{'preLN' if v['norm_first'] else 'postLN'}-{v['pos_encoding']}" for v in VARIANTS]


def random_ids(n: int, vocab: int, gen_seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(gen_seed)
    return torch.randint(4, vocab, (n,), generator=g)  # ids ≥ 4: no special token


def _src_and_memory(model: Transformer, src_len: int = 6):
    if not model.cfg.is_encoder_decoder:
        return None, None, None
    src = random_ids(src_len, model.cfg.vocab_size, 11)[None]
    memory, _ = model.encode(src)
    return src, memory, model.src_mask(src)


def non_special(log_probs: torch.Tensor) -> int:
    """Greedy among ordinary tokens, so that a random model keeps decoding instead of stopping at <eos>."""
    return int(torch.argmax(log_probs[4:])) + 4


@pytest.mark.parametrize("variant", VARIANTS, ids=VARIANT_IDS)
def test_cached_decode_equals_full_recompute(make_model, variant):
    model = make_model(**variant)
    src, memory, memory_mask = _src_and_memory(model)
    tgt = torch.cat([torch.tensor([model.cfg.bos_id]), random_ids(9, model.cfg.vocab_size, 12)])[None]
    with torch.no_grad():
        teacher_forced = model(src, tgt)  # [1, 10, vocab], all positions at once
        cache = model.new_cache()
        for t in range(tgt.size(1)):
            step = model.logits(model.decode(tgt[:, t : t + 1], memory, memory_mask, cache=cache).hidden)[0, -1]
            full = model.logits(model.decode(tgt[:, : t + 1], memory, memory_mask).hidden)[0, -1]
            assert cache.positions == t + 1
            torch.testing.assert_close(step, full, atol=ATOL, rtol=0)
            torch.testing.assert_close(step, teacher_forced[0, t], atol=ATOL, rtol=0)


@pytest.mark.parametrize("variant", VARIANTS, ids=VARIANT_IDS)
def test_stepper_cached_equals_uncached(make_model, variant):
    model = make_model(**variant)
    src = random_ids(7, model.cfg.vocab_size, 13).tolist() + [model.cfg.eos_id]
    kw = dict(src_ids=src) if model.cfg.is_encoder_decoder else dict(prefix_ids=[model.cfg.bos_id, 5, 6])
    cached = Stepper(model, max_new_tokens=8, use_cache=True, **kw)
    plain = Stepper(model, max_new_tokens=8, use_cache=False, **kw)
    cached.run_to_end(non_special)
    plain.run_to_end(non_special)
    assert len(cached.records) == len(plain.records) == 8
    assert cached.tokens == plain.tokens
    for a, b in zip(cached.records, plain.records, strict=True):
        assert a.token_id == b.token_id
        torch.testing.assert_close(a.log_probs, b.log_probs, atol=ATOL, rtol=0)
        torch.testing.assert_close(a.self_attention, b.self_attention, atol=ATOL, rtol=0)
        if model.cfg.is_encoder_decoder:
            torch.testing.assert_close(a.cross_attention, b.cross_attention, atol=ATOL, rtol=0)
        else:
            assert a.cross_attention is None and b.cross_attention is None
    # Shapes: [layers, heads, prefix_len] grows by one per step; cross [layers, heads, src_len].
    L, H = model.cfg.n_decoder_layers, model.cfg.n_heads
    first_prefix = len(cached.prefix)
    for i, rec in enumerate(cached.records):
        assert rec.self_attention.shape == (L, H, first_prefix + i)
        torch.testing.assert_close(rec.self_attention.sum(-1), torch.ones(L, H), atol=1e-5, rtol=0)
        assert float(rec.log_probs.exp().sum()) == pytest.approx(1.0, abs=1e-5)
        assert rec.prob == pytest.approx(float(rec.log_probs[rec.token_id].exp()), abs=1e-7)
    if model.cfg.is_encoder_decoder:
        assert cached.cross_attention_matrix().shape == (L, H, 8, len(src))
    assert cached.cache.positions == len(cached.tokens) - 1  # the newest token is not fed yet
    assert plain.cache.positions == 0 and plain.records[-1].cache_bytes == 0


@pytest.mark.parametrize("variant", VARIANTS[::2], ids=VARIANT_IDS[::2])
def test_future_target_tokens_do_not_change_earlier_logits(make_model, variant):
    model = make_model(**variant)
    src, _, _ = _src_and_memory(model)
    tgt = torch.cat([torch.tensor([model.cfg.bos_id]), random_ids(8, model.cfg.vocab_size, 14)])[None]
    with torch.no_grad():
        base = model(src, tgt)
        for j in (1, 4, 8):
            changed = tgt.clone()
            changed[0, j] = 4 + (int(changed[0, j]) - 4 + 7) % (model.cfg.vocab_size - 4)
            assert changed[0, j] != tgt[0, j]
            out = model(src, changed)
            torch.testing.assert_close(out[:, :j], base[:, :j], atol=1e-6, rtol=0)
            assert (out[:, j] - base[:, j]).abs().max() > 1e-4  # the changed position itself does change


@pytest.mark.parametrize("variant", VARIANTS[::2], ids=VARIANT_IDS[::2])
def test_padding_does_not_change_results(make_model, variant):
    model = make_model(**variant)
    pad, bos, vocab = model.cfg.pad_id, model.cfg.bos_id, model.cfg.vocab_size
    short_src = random_ids(4, vocab, 15).tolist() + [2]
    long_src = random_ids(9, vocab, 16).tolist() + [2]
    short_tgt = [bos] + random_ids(3, vocab, 17).tolist()
    long_tgt = [bos] + random_ids(7, vocab, 18).tolist()

    def padded(rows):
        width = max(map(len, rows))
        return torch.tensor([r + [pad] * (width - len(r)) for r in rows])

    enc_dec = model.cfg.is_encoder_decoder
    with torch.no_grad():
        alone = model(torch.tensor([short_src]) if enc_dec else None, torch.tensor([short_tgt]))
        # The short pair first (padded on the right in both src and tgt), then second.
        for rows in ((short_src, long_src), (long_src, short_src)):
            i = rows.index(short_src)
            tgts = (short_tgt, long_tgt) if i == 0 else (long_tgt, short_tgt)
            batch = model(padded(rows) if enc_dec else None, padded(tgts))
            torch.testing.assert_close(batch[i, : len(short_tgt)], alone[0], atol=ATOL, rtol=0)
        if enc_dec:
            # The encoder output of real positions is also unaffected by the source padding.
            mem_alone, _ = model.encode(torch.tensor([short_src]))
            mem_batch, _ = model.encode(padded([short_src, long_src]))
            torch.testing.assert_close(mem_batch[0, : len(short_src)], mem_alone[0], atol=ATOL, rtol=0)


def test_greedy_batch_is_independent_of_batch_composition(make_model):
    model = make_model()
    vocab = model.cfg.vocab_size
    srcs = [random_ids(n, vocab, 20 + n).tolist() + [2] for n in (3, 8, 5)]
    together = greedy_batch(model, srcs, max_new_tokens=10)
    alone = [greedy_batch(model, [s], max_new_tokens=10)[0] for s in srcs]
    assert together == alone
    for s, ids in zip(srcs, together, strict=True):  # and the same as the Stepper's greedy run
        st = Stepper(model, s, max_new_tokens=10)
        st.run_to_end()
        assert st.output_ids() == ids


def test_traced_model_equals_fast_model(make_model):
    model = make_model()
    src = random_ids(6, model.cfg.vocab_size, 30)[None]
    tgt = torch.cat([torch.tensor([1]), random_ids(5, model.cfg.vocab_size, 31)])[None]
    with torch.no_grad():
        mem_fast, w_none = model.encode(src)
        mem_traced, enc_w = model.encode(src, trace=True)
        out = model.decode(tgt, mem_traced, model.src_mask(src), trace=True)
        fast_logits = model(src, tgt)
    assert w_none == []
    torch.testing.assert_close(mem_traced, mem_fast, atol=ATOL, rtol=0)
    torch.testing.assert_close(model.logits(out.hidden), fast_logits, atol=ATOL, rtol=0)
    assert len(enc_w) == 2 and enc_w[0].shape == (1, 4, 6, 6)
    assert len(out.self_weights) == 2 and out.self_weights[0].shape == (1, 4, 6, 6)
    assert len(out.cross_weights) == 2 and out.cross_weights[0].shape == (1, 4, 6, 6)


def test_trace_pair_shapes_and_logits(make_model, tokenizer, encode_src, encode_tgt):
    model = make_model()
    src, tgt = encode_src("The house is big."), encode_tgt("Das Haus ist groß.")
    tr = trace_pair(model, tokenizer, src, tgt, logits=True)
    assert set(tr.kinds) == {"encoder", "decoder", "cross"}
    assert tr.attention["encoder"].shape == (2, 4, len(src), len(src))
    assert tr.attention["decoder"].shape == (2, 4, len(tgt), len(tgt))
    assert tr.attention["cross"].shape == (2, 4, len(tgt), len(src))
    assert tr.labels("cross") == (tr.tgt_tokens, tr.src_tokens)
    assert tr.tgt_tokens[0] == "<bos>" and tr.src_tokens[-1] == "<eos>"
    with torch.no_grad():
        torch.testing.assert_close(tr.logits, model(torch.tensor([src]), torch.tensor([tgt]))[0], atol=ATOL, rtol=0)
    # Decoder self-attention is causal: nothing above the diagonal.
    upper = torch.triu(torch.ones(len(tgt), len(tgt), dtype=torch.bool), 1)
    assert torch.all(tr.attention["decoder"][..., upper] == 0)

    lm = make_model(arch="decoder-only")
    tr2 = trace_pair(lm, tokenizer, None, tgt)
    assert tr2.kinds == ["self"] and tr2.attention["self"].shape == (2, 4, len(tgt), len(tgt))


def test_model_head_mask_ablation_changes_output_only_when_zero(make_model):
    model = make_model()
    src = random_ids(6, model.cfg.vocab_size, 32)[None]
    with torch.no_grad():
        base, _ = model.encode(src)
        same, _ = model.encode(src, head_mask=torch.ones(2, 4))
        hm = torch.ones(2, 4)
        hm[1, 2] = 0
        ablated, _ = model.encode(src, head_mask=hm)
    torch.testing.assert_close(same, base, atol=0, rtol=0)
    assert (ablated - base).abs().max() > 1e-4


# --- overfitting ------------------------------------------------------------------------------------------------
def test_tiny_model_overfits_and_greedy_reproduces_targets(make_model, tokenizer, pairs, encode_src, encode_tgt):
    chosen = pairs[:5]
    srcs = [encode_src(en) for en, _ in chosen]
    tgts = [encode_tgt(de) for _, de in chosen]
    model = make_model(seed=1)
    pad = model.cfg.pad_id

    def padded(rows):
        width = max(map(len, rows))
        return torch.tensor([r + [pad] * (width - len(r)) for r in rows])

    src, tgt = padded(srcs), padded(tgts)
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    model.train()
    losses = []
    for _ in range(300):
        logits = model(src, tgt[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)), tgt[:, 1:].reshape(-1), ignore_index=pad)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
        if loss.item() < 0.01:
            break
    model.eval()
    with torch.no_grad():
        logits = model(src, tgt[:, :-1])
        final = F.cross_entropy(logits.reshape(-1, logits.size(-1)), tgt[:, 1:].reshape(-1), ignore_index=pad).item()
    assert losses[0] > 3.0  # it started from chance level (ln |V| ≈ 5.9), so the drop is real
    assert final < 0.05, f"final cross-entropy {final:.4f} after {len(losses)} steps"

    expected = [t[1:-1] for t in tgts]  # without <bos> and <eos>
    assert greedy_batch(model, srcs) == expected
    for s, exp in zip(srcs, expected, strict=True):
        st = Stepper(model, s)
        st.run_to_end()
        assert st.finished and st.generated[-1] == model.cfg.eos_id
        assert st.output_ids() == exp
    assert translate_texts(model, tokenizer, [en for en, _ in chosen]) == [de for _, de in chosen]


def test_causal_mask_with_offset():
    m = causal_mask(2, 5)  # two new queries at absolute positions 3 and 4
    assert m.tolist() == [[True, True, True, True, False], [True, True, True, True, True]]


def test_parameter_sharing_and_count(make_model):
    model = make_model()
    assert model.generator.weight is model.embed.weight  # tied (paper §3.4)
    untied = make_model(tie_embeddings=False)
    assert untied.generator.weight is not untied.embed.weight
    assert untied.num_parameters() - model.num_parameters() == model.cfg.vocab_size * model.cfg.d_model
    with pytest.raises(ValueError):
        model(None, torch.tensor([[1, 5]]))  # an encoder-decoder needs src


def test_embeddings_are_scaled_and_get_positions(make_model):
    """Paper §3.4/§3.5: token embedding × √d_model, plus the positional encoding of each position."""
    model = make_model()
    ids = torch.tensor([[5, 6, 7, 5]])
    with torch.no_grad():
        x = model.embed_tokens(ids)
        shifted = model.embed_tokens(ids[:, 2:], offset=2)
    expected = model.embed.weight[ids] * model.cfg.d_model**0.5 + model.pos.table[:4]
    torch.testing.assert_close(x, expected, atol=1e-6, rtol=0)
    torch.testing.assert_close(shifted, x[:, 2:], atol=1e-6, rtol=0)
    assert not torch.allclose(x[0, 0], x[0, 3])  # same token, different position


def test_a_decoder_only_stepper_continues_the_prompt_it_is_given_as_src_ids(make_model):
    """The one stepping API: a decoder-only model's text arrives where a translator's source would, and the
    decoding starts from <bos> + that prompt (it used to start from <bos> alone and ignore the text)."""
    from decoding.beam import beam_search
    from model.config import decoder_prefix, lm_prompt

    model = make_model(arch="decoder-only")
    cfg = model.cfg
    prompt = [5, 6, 7, cfg.eos_id]
    assert decoder_prefix(cfg, prompt, None) == lm_prompt(cfg, prompt) == [cfg.bos_id, 5, 6, 7]
    assert decoder_prefix(cfg, prompt, [cfg.bos_id, 9]) == [cfg.bos_id, 9]
    a = Stepper(model, prompt, max_new_tokens=4)
    b = Stepper(model, None, prefix_ids=lm_prompt(cfg, prompt), max_new_tokens=4)
    a.run_to_end(non_special)
    b.run_to_end(non_special)
    assert a.tokens[:4] == [cfg.bos_id, 5, 6, 7] and a.tokens == b.tokens
    beam = beam_search(model, prompt, beam_size=2, max_new_tokens=3)
    beam_b = beam_search(model, None, beam_size=2, max_new_tokens=3, prefix_ids=lm_prompt(cfg, prompt))
    assert [h.tokens for h in beam.hypotheses] == [h.tokens for h in beam_b.hypotheses]
    # a translator's prefix is still <bos> alone: its src_ids go to the encoder
    assert decoder_prefix(make_model().cfg, prompt, None) == [make_model().cfg.bos_id]


def test_next_token_logits_suppress_only_the_listed_ids(make_model):
    """Our models list none: decoding chooses from the plain logits. A listed id gets −∞ in every decoding path."""
    model = make_model()
    hidden = torch.randn(2, 3, model.cfg.d_model)
    with torch.no_grad():
        assert torch.equal(model.next_token_logits(hidden), model.logits(hidden))
        suppressing = make_model(suppress_ids=[0, 7])
        plain, chosen = suppressing.logits(hidden), suppressing.next_token_logits(hidden)
    assert (chosen[..., [0, 7]] == float("-inf")).all()
    keep = [i for i in range(model.cfg.vocab_size) if i not in (0, 7)]
    assert torch.equal(chosen[..., keep], plain[..., keep])


@pytest.mark.parametrize("arch", ["encoder-decoder", "decoder-only"])
def test_a_start_token_equal_to_pad_is_not_masked(make_model, arch):
    """Marian starts its decoder from <pad>: with bos_id = pad_id the first position is a real key, exactly as a
    distinct <bos> with the same embedding would be; later pads stay masked."""
    model = make_model(arch=arch)
    as_pad = make_model(arch=arch, bos_id=model.cfg.pad_id)
    src, memory, memory_mask = _src_and_memory(model)
    body = random_ids(5, model.cfg.vocab_size, 13)
    with torch.no_grad():
        as_pad.embed.weight[model.cfg.pad_id] = model.embed.weight[model.cfg.bos_id]
        plain = model.decode(torch.cat([torch.tensor([model.cfg.bos_id]), body])[None], memory, memory_mask, trace=True)
        padded = as_pad.decode(
            torch.cat([torch.tensor([model.cfg.pad_id]), body])[None], memory, memory_mask, trace=True
        )
    torch.testing.assert_close(padded.hidden, plain.hidden, atol=ATOL, rtol=0)
    assert (padded.self_weights[0][0, :, :, 0] > 0).all()
