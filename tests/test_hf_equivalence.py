"""Hugging Face MarianMT and GPT-2 folders run by our Transformer give what ``transformers`` gives.

Tiny random reference models (``tests/hf_fixtures.py``) are saved with ``save_pretrained`` and loaded with
:func:`model.hf.loader.load_hf_model`; on the same ids, fp32, eval mode: the logits, every attention weight of
every layer and head (encoder self, decoder self, cross; GPT-2 self), greedy decoding token for token against
``generate``, and the KV-cached steps against the full forward. The folders' files and errors:
``tests/test_hf_folders.py``.
"""

from __future__ import annotations

import dataclasses
from collections import Counter

import pytest
import torch

transformers = pytest.importorskip("transformers")  # a dev dependency: the reference implementation

from decoding.batched import greedy_batch
from decoding.beam import beam_search
from decoding.sampling import Chooser, SamplingConfig
from decoding.stepping import Stepper
from model.positional import sinusoidal_table

ATOL = 1e-5
#: Marian sources (``</s>`` = 0 last) of different lengths, so that the batch is padded.
SOURCES = [[5, 9, 14, 20, 31, 0], [7, 8, 0], [33, 34, 35, 36, 0], [60, 3, 61, 0]]
#: GPT-2 prompts: ``<|endoftext|>`` (id 100) then ordinary tokens.
PROMPTS = [[100, 5, 6, 7, 8, 9], [100, 50, 61, 72, 83, 94]]


def _padded(batch: list[list[int]], pad: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-padded ids ``[batch, longest]`` and the attention mask (1 = token) as ``transformers`` takes them."""
    width = max(len(s) for s in batch)
    ids = torch.tensor([s + [pad] * (width - len(s)) for s in batch])
    return ids, (ids != pad).long()


def _close(ours: torch.Tensor, theirs: torch.Tensor) -> None:
    torch.testing.assert_close(ours, theirs, atol=ATOL, rtol=0)


def _until(ids: list[int], eos: int) -> list[int]:
    return ids[: ids.index(eos)] if eos in ids else ids


def _varied_stop_token(rows: list[list[int]]) -> int:
    """The generated token whose first occurrence is at the most different steps across ``rows``: used as
    ``<eos>``, it ends the rows of one batch at different steps (a random model otherwise never says ``<eos>``)."""
    candidates = Counter(t for row in rows for t in row)
    return max(candidates, key=lambda t: (len({row.index(t) if t in row else -1 for row in rows}), candidates[t]))


# --- MarianMT -------------------------------------------------------------------------------------------------
def test_marian_config_and_info(hf_marian):
    cfg, ref = hf_marian.cfg, hf_marian.reference.config
    assert cfg.arch == "encoder-decoder" and (cfg.vocab_size, cfg.d_model, cfg.n_heads) == (97, 16, 4)
    assert (cfg.n_encoder_layers, cfg.n_decoder_layers, cfg.d_ff, cfg.max_len) == (2, 2, 32, 64)
    assert (cfg.activation, cfg.pos_layout, cfg.scale_embeddings, cfg.logits_bias) == ("silu", "halves", True, True)
    assert not cfg.norm_first and cfg.tie_embeddings
    assert cfg.pad_id == cfg.bos_id == ref.pad_token_id == ref.decoder_start_token_id == 96
    assert cfg.eos_id == 0 and cfg.unk_id == 1 and cfg.suppress_ids == [96]
    assert hf_marian.info["model_type"] == "marian" and hf_marian.info["name_or_path"] == "tiny/opus-mt-en-de"
    assert hf_marian.info["parameters"] == hf_marian.model.num_parameters()
    assert hf_marian.info["file_bytes"] == (hf_marian.folder / "model.safetensors").stat().st_size


def _marian_reference_forward(hf_marian, src_batch, tgt):
    ids, mask = _padded(src_batch, hf_marian.cfg.pad_id)
    with torch.no_grad():
        return ids, hf_marian.reference(
            input_ids=ids, attention_mask=mask, decoder_input_ids=tgt, output_attentions=True
        )


def _targets(cfg, n_rows: int, length: int, seed: int) -> torch.Tensor:
    """Decoder inputs: the start token, then ordinary tokens (none special)."""
    g = torch.Generator().manual_seed(seed)
    body = torch.randint(3, cfg.vocab_size - 1, (n_rows, length - 1), generator=g)
    return torch.cat([torch.full((n_rows, 1), cfg.bos_id), body], dim=1)


def test_marian_logits_and_every_attention_weight_equal_transformers(hf_marian):
    model = hf_marian.model
    tgt = _targets(hf_marian.cfg, len(SOURCES), 7, seed=1)
    src, ref = _marian_reference_forward(hf_marian, SOURCES, tgt)
    with torch.no_grad():
        memory, enc_w = model.encode(src, trace=True)
        out = model.decode(tgt, memory, model.src_mask(src), trace=True)
        _close(model.logits(out.hidden), ref.logits)
        _close(model(src, tgt), ref.logits)  # the fast path too
    for ours, theirs in [
        (enc_w, ref.encoder_attentions),
        (out.self_weights, ref.decoder_attentions),
        (out.cross_weights, ref.cross_attentions),
    ]:
        assert len(ours) == len(theirs) == 2
        for w_ours, w_theirs in zip(ours, theirs, strict=True):  # [batch, heads, q_len, k_len], every layer and head
            assert w_ours.shape == w_theirs.shape
            _close(w_ours, w_theirs)


def test_marian_cached_steps_equal_the_full_forward(hf_marian):
    model = hf_marian.model
    tgt = _targets(hf_marian.cfg, 1, 8, seed=2)
    src, ref = _marian_reference_forward(hf_marian, SOURCES[:1], tgt)
    cache = model.new_cache()
    with torch.no_grad():
        memory, _ = model.encode(src)
        for t in range(tgt.size(1)):
            out = model.decode(
                tgt[:, t : t + 1], memory if t == 0 else None, model.src_mask(src), cache=cache, trace=True
            )
            _close(model.logits(out.hidden)[0, 0], ref.logits[0, t])
            for layer in range(2):
                _close(out.self_weights[layer][0, :, 0], ref.decoder_attentions[layer][0, :, t, : t + 1])
                _close(out.cross_weights[layer][0, :, 0], ref.cross_attentions[layer][0, :, t])


def _marian_generate(hf_marian, src_batch, max_new_tokens: int, eos: int) -> list[list[int]]:
    """``generate`` greedy, with the rules our greedy decoding has and no other: stop at ``eos``, never ``<pad>``
    (``bad_words_ids``, as the real opus-mt config), no forced ``</s>`` at the length cap."""
    pad = hf_marian.cfg.pad_id
    ids, mask = _padded(src_batch, pad)
    out = hf_marian.reference.generate(
        input_ids=ids,
        attention_mask=mask,
        do_sample=False,
        num_beams=1,
        max_new_tokens=max_new_tokens,
        decoder_start_token_id=pad,
        pad_token_id=pad,
        eos_token_id=eos,
        bad_words_ids=[[pad]],
        forced_eos_token_id=None,
        min_length=0,
        repetition_penalty=1.0,
        no_repeat_ngram_size=0,
    )
    return [_until(row[1:], eos) for row in out.tolist()]


@pytest.mark.parametrize("eos", ["config", "varied"])
def test_marian_greedy_equals_generate(hf_marian, monkeypatch, eos):
    model = hf_marian.model
    eos_id = hf_marian.cfg.eos_id
    if eos == "varied":
        eos_id = _varied_stop_token(_marian_generate(hf_marian, SOURCES, 12, hf_marian.cfg.eos_id))
        monkeypatch.setattr(model, "cfg", dataclasses.replace(hf_marian.cfg, eos_id=eos_id))
    theirs = _marian_generate(hf_marian, SOURCES, 12, eos_id)
    assert greedy_batch(model, SOURCES, max_new_tokens=12) == theirs
    if eos == "varied":
        assert len({len(row) for row in theirs}) > 1, "the rows should stop at different steps"


def test_marian_never_generates_pad(hf_marian, monkeypatch):
    """With <pad> the most probable token everywhere, both implementations still never choose it."""
    pad = hf_marian.cfg.pad_id
    boosted = hf_marian.model.generator.bias.detach().clone()
    boosted[pad] += 100.0
    monkeypatch.setattr(hf_marian.model.generator, "bias", torch.nn.Parameter(boosted))
    monkeypatch.setattr(hf_marian.reference, "final_logits_bias", boosted[None].clone())
    ours = greedy_batch(hf_marian.model, SOURCES, max_new_tokens=8)
    assert ours == _marian_generate(hf_marian, SOURCES, 8, hf_marian.cfg.eos_id)
    assert all(len(row) == 8 and pad not in row for row in ours)
    sampler = Chooser(SamplingConfig(strategy="sample", temperature=2.0, seed=3))
    stepper = Stepper(hf_marian.model, SOURCES[0], max_new_tokens=8)
    stepper.run_to_end(sampler)
    assert pad not in stepper.generated and stepper.records[0].log_probs[pad] == float("-inf")
    assert all(pad not in h.tokens for h in beam_search(hf_marian.model, SOURCES[0], 3, max_new_tokens=6).hypotheses)


@pytest.mark.parametrize("max_len,d_model", [(64, 16), (50, 32), (7, 6)])
def test_marian_sinusoidal_table_equals_transformers(max_len, d_model):
    from transformers.models.marian.modeling_marian import MarianSinusoidalPositionalEmbedding

    table = MarianSinusoidalPositionalEmbedding(max_len, d_model)
    # transformers 5 fills the table on demand (create_weight); 4.x filled it in the constructor.
    theirs = table.create_weight() if hasattr(table, "create_weight") else table.weight.detach()
    _close(sinusoidal_table(max_len, d_model, layout="halves"), theirs)


def test_marian_model_uses_the_reference_positions(hf_marian):
    _close(hf_marian.model.pos.table, hf_marian.reference.model.encoder.embed_positions.weight.detach())


# --- GPT-2 ----------------------------------------------------------------------------------------------------
def test_gpt2_config_and_info(hf_gpt2):
    cfg = hf_gpt2.cfg
    assert cfg.arch == "decoder-only" and (cfg.vocab_size, cfg.d_model, cfg.n_heads) == (101, 16, 4)
    assert (cfg.n_decoder_layers, cfg.d_ff, cfg.max_len, cfg.pos_encoding) == (2, 64, 64, "learned")
    assert (cfg.activation, cfg.scale_embeddings, cfg.logits_bias, cfg.norm_first) == ("gelu_tanh", False, False, True)
    assert cfg.bos_id == cfg.eos_id == cfg.pad_id == 100 and cfg.suppress_ids == []
    assert hf_gpt2.info["model_type"] == "gpt2" and hf_gpt2.info["parameters"] == hf_gpt2.model.num_parameters()


def test_gpt2_logits_and_every_attention_weight_equal_transformers(hf_gpt2):
    ids = torch.tensor(PROMPTS)
    with torch.no_grad():
        ref = hf_gpt2.reference(input_ids=ids, output_attentions=True)
        out = hf_gpt2.model.decode(ids, trace=True)
        _close(hf_gpt2.model.logits(out.hidden), ref.logits)
        _close(hf_gpt2.model(None, ids), ref.logits)
    assert len(out.self_weights) == len(ref.attentions) == 2
    for ours, theirs in zip(out.self_weights, ref.attentions, strict=True):
        _close(ours, theirs)


def test_gpt2_cached_steps_equal_the_full_forward(hf_gpt2):
    ids = torch.tensor(PROMPTS[:1])
    cache = hf_gpt2.model.new_cache()
    with torch.no_grad():
        ref = hf_gpt2.reference(input_ids=ids, output_attentions=True)
        for t in range(ids.size(1)):
            out = hf_gpt2.model.decode(ids[:, t : t + 1], cache=cache, trace=True)
            _close(hf_gpt2.model.logits(out.hidden)[0, 0], ref.logits[0, t])
            for layer in range(2):
                _close(out.self_weights[layer][0, :, 0], ref.attentions[layer][0, :, t, : t + 1])


def _gpt2_generate(hf_gpt2, prompt: list[int], max_new_tokens: int, eos: int) -> list[int]:
    ids = torch.tensor([prompt])
    out = hf_gpt2.reference.generate(
        input_ids=ids,
        attention_mask=torch.ones_like(ids),
        do_sample=False,
        num_beams=1,
        max_new_tokens=max_new_tokens,
        eos_token_id=eos,
        pad_token_id=eos,
        min_length=0,
        repetition_penalty=1.0,
        no_repeat_ngram_size=0,
    )
    return out[0, len(prompt) :].tolist()


@pytest.mark.parametrize("eos", ["config", "varied"])
def test_gpt2_greedy_equals_generate(hf_gpt2, monkeypatch, eos):
    eos_id = hf_gpt2.cfg.eos_id
    if eos == "varied":  # a token the model says, so that the decoding stops early at it
        eos_id = _gpt2_generate(hf_gpt2, PROMPTS[0], 12, eos_id)[3]
        monkeypatch.setattr(hf_gpt2.model, "cfg", dataclasses.replace(hf_gpt2.cfg, eos_id=eos_id))
    for prompt in PROMPTS:
        stepper = Stepper(hf_gpt2.model, prefix_ids=prompt, max_new_tokens=12)
        stepper.run_to_end()
        assert stepper.generated == _gpt2_generate(hf_gpt2, prompt, 12, eos_id)
    if eos == "varied":
        assert stepper.generated[-1] == eos_id or len(stepper.generated) == 12
