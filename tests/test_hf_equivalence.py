"""Hugging Face MarianMT and GPT-2 folders run by our Transformer give what ``transformers`` gives.

Tiny random reference models (``tests/hf_fixtures.py``) are saved with ``save_pretrained`` and loaded with
:func:`model.hf.loader.load_hf_model`; on the same ids, fp32, eval mode: the logits, every attention weight of
every layer and head (encoder self, decoder self, cross; GPT-2 self), greedy decoding token for token against
``generate``, and the KV-cached steps against the full forward. Then ``pytorch_model.bin`` (weights only) and the
errors a user can meet. ``transformers`` is the reference only: ``model/`` never imports it (checked here).
"""

from __future__ import annotations

import ast
import dataclasses
import json
from collections import Counter
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

transformers = pytest.importorskip("transformers")  # a dev dependency: the reference implementation

from hf_fixtures import write_tiny_gpt2_model, write_tiny_marian_model

from decoding.batched import greedy_batch
from decoding.beam import beam_search
from decoding.sampling import Chooser, SamplingConfig
from decoding.stepping import Stepper
from model.checkpoint import CheckpointError, save_checkpoint
from model.hf.config import hf_to_model_config
from model.hf.loader import is_hf_model_dir, load_hf_model
from model.positional import sinusoidal_table

ATOL = 1e-5
ROOT = Path(__file__).resolve().parent.parent
#: Marian sources (``</s>`` = 0 last) of different lengths, so that the batch is padded.
SOURCES = [[5, 9, 14, 20, 31, 0], [7, 8, 0], [33, 34, 35, 36, 0], [60, 3, 61, 0]]
#: GPT-2 prompts: ``<|endoftext|>`` (id 100) then ordinary tokens.
PROMPTS = [[100, 5, 6, 7, 8, 9], [100, 50, 61, 72, 83, 94]]


def load_folder(folder: Path, reference) -> SimpleNamespace:
    model, cfg, info = load_hf_model(folder)
    return SimpleNamespace(folder=folder, reference=reference, model=model, cfg=cfg, info=info)


@pytest.fixture(scope="module")
def marian(tmp_path_factory):
    folder = tmp_path_factory.mktemp("opus-mt-tiny")
    return load_folder(folder, write_tiny_marian_model(folder))


@pytest.fixture(scope="module")
def gpt2(tmp_path_factory):
    folder = tmp_path_factory.mktemp("gpt2-tiny")
    return load_folder(folder, write_tiny_gpt2_model(folder))


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
def test_marian_config_and_info(marian):
    cfg, ref = marian.cfg, marian.reference.config
    assert cfg.arch == "encoder-decoder" and (cfg.vocab_size, cfg.d_model, cfg.n_heads) == (97, 16, 4)
    assert (cfg.n_encoder_layers, cfg.n_decoder_layers, cfg.d_ff, cfg.max_len) == (2, 2, 32, 64)
    assert (cfg.activation, cfg.pos_layout, cfg.scale_embeddings, cfg.logits_bias) == ("silu", "halves", True, True)
    assert not cfg.norm_first and cfg.tie_embeddings
    assert cfg.pad_id == cfg.bos_id == ref.pad_token_id == ref.decoder_start_token_id == 96
    assert cfg.eos_id == 0 and cfg.unk_id == 1 and cfg.suppress_ids == [96]
    assert marian.info["model_type"] == "marian" and marian.info["name_or_path"] == "tiny/opus-mt-en-de"
    assert marian.info["parameters"] == marian.model.num_parameters()
    assert marian.info["file_bytes"] == (marian.folder / "model.safetensors").stat().st_size


def _marian_reference_forward(marian, src_batch, tgt):
    ids, mask = _padded(src_batch, marian.cfg.pad_id)
    with torch.no_grad():
        return ids, marian.reference(input_ids=ids, attention_mask=mask, decoder_input_ids=tgt,
                                     output_attentions=True)


def _targets(cfg, n_rows: int, length: int, seed: int) -> torch.Tensor:
    """Decoder inputs: the start token, then ordinary tokens (none special)."""
    g = torch.Generator().manual_seed(seed)
    body = torch.randint(3, cfg.vocab_size - 1, (n_rows, length - 1), generator=g)
    return torch.cat([torch.full((n_rows, 1), cfg.bos_id), body], dim=1)


def test_marian_logits_and_every_attention_weight_equal_transformers(marian):
    model = marian.model
    tgt = _targets(marian.cfg, len(SOURCES), 7, seed=1)
    src, ref = _marian_reference_forward(marian, SOURCES, tgt)
    with torch.no_grad():
        memory, enc_w = model.encode(src, trace=True)
        out = model.decode(tgt, memory, model.src_mask(src), trace=True)
        _close(model.logits(out.hidden), ref.logits)
        _close(model(src, tgt), ref.logits)  # the fast path too
    for ours, theirs in [(enc_w, ref.encoder_attentions), (out.self_weights, ref.decoder_attentions),
                         (out.cross_weights, ref.cross_attentions)]:
        assert len(ours) == len(theirs) == 2
        for w_ours, w_theirs in zip(ours, theirs, strict=True):  # [batch, heads, q_len, k_len], every layer and head
            assert w_ours.shape == w_theirs.shape
            _close(w_ours, w_theirs)


def test_marian_cached_steps_equal_the_full_forward(marian):
    model = marian.model
    tgt = _targets(marian.cfg, 1, 8, seed=2)
    src, ref = _marian_reference_forward(marian, SOURCES[:1], tgt)
    cache = model.new_cache()
    with torch.no_grad():
        memory, _ = model.encode(src)
        for t in range(tgt.size(1)):
            out = model.decode(tgt[:, t: t + 1], memory if t == 0 else None, model.src_mask(src), cache=cache,
                               trace=True)
            _close(model.logits(out.hidden)[0, 0], ref.logits[0, t])
            for layer in range(2):
                _close(out.self_weights[layer][0, :, 0], ref.decoder_attentions[layer][0, :, t, : t + 1])
                _close(out.cross_weights[layer][0, :, 0], ref.cross_attentions[layer][0, :, t])


def _marian_generate(marian, src_batch, max_new_tokens: int, eos: int) -> list[list[int]]:
    """``generate`` greedy, with the rules our greedy decoding has and no other: stop at ``eos``, never ``<pad>``
    (``bad_words_ids``, as the real opus-mt config), no forced ``</s>`` at the length cap."""
    pad = marian.cfg.pad_id
    ids, mask = _padded(src_batch, pad)
    out = marian.reference.generate(
        input_ids=ids, attention_mask=mask, do_sample=False, num_beams=1, max_new_tokens=max_new_tokens,
        decoder_start_token_id=pad, pad_token_id=pad, eos_token_id=eos, bad_words_ids=[[pad]],
        forced_eos_token_id=None, min_length=0, repetition_penalty=1.0, no_repeat_ngram_size=0)
    return [_until(row[1:], eos) for row in out.tolist()]


@pytest.mark.parametrize("eos", ["config", "varied"])
def test_marian_greedy_equals_generate(marian, monkeypatch, eos):
    model = marian.model
    eos_id = marian.cfg.eos_id
    if eos == "varied":
        eos_id = _varied_stop_token(_marian_generate(marian, SOURCES, 12, marian.cfg.eos_id))
        monkeypatch.setattr(model, "cfg", dataclasses.replace(marian.cfg, eos_id=eos_id))
    theirs = _marian_generate(marian, SOURCES, 12, eos_id)
    assert greedy_batch(model, SOURCES, max_new_tokens=12) == theirs
    if eos == "varied":
        assert len({len(row) for row in theirs}) > 1, "the rows should stop at different steps"


def test_marian_never_generates_pad(marian, monkeypatch):
    """With <pad> the most probable token everywhere, both implementations still never choose it."""
    pad = marian.cfg.pad_id
    boosted = marian.model.generator.bias.detach().clone()
    boosted[pad] += 100.0
    monkeypatch.setattr(marian.model.generator, "bias", torch.nn.Parameter(boosted))
    monkeypatch.setattr(marian.reference, "final_logits_bias", boosted[None].clone())
    ours = greedy_batch(marian.model, SOURCES, max_new_tokens=8)
    assert ours == _marian_generate(marian, SOURCES, 8, marian.cfg.eos_id)
    assert all(len(row) == 8 and pad not in row for row in ours)
    sampler = Chooser(SamplingConfig(strategy="sample", temperature=2.0, seed=3))
    stepper = Stepper(marian.model, SOURCES[0], max_new_tokens=8)
    stepper.run_to_end(sampler)
    assert pad not in stepper.generated and stepper.records[0].log_probs[pad] == float("-inf")
    assert all(pad not in h.tokens for h in beam_search(marian.model, SOURCES[0], 3, max_new_tokens=6).hypotheses)


@pytest.mark.parametrize("max_len,d_model", [(64, 16), (50, 32), (7, 6)])
def test_marian_sinusoidal_table_equals_transformers(max_len, d_model):
    from transformers.models.marian.modeling_marian import MarianSinusoidalPositionalEmbedding

    table = MarianSinusoidalPositionalEmbedding(max_len, d_model)
    # transformers 5 fills the table on demand (create_weight); 4.x filled it in the constructor.
    theirs = table.create_weight() if hasattr(table, "create_weight") else table.weight.detach()
    _close(sinusoidal_table(max_len, d_model, layout="halves"), theirs)


def test_marian_model_uses_the_reference_positions(marian):
    _close(marian.model.pos.table, marian.reference.model.encoder.embed_positions.weight.detach())


# --- GPT-2 ----------------------------------------------------------------------------------------------------
def test_gpt2_config_and_info(gpt2):
    cfg = gpt2.cfg
    assert cfg.arch == "decoder-only" and (cfg.vocab_size, cfg.d_model, cfg.n_heads) == (101, 16, 4)
    assert (cfg.n_decoder_layers, cfg.d_ff, cfg.max_len, cfg.pos_encoding) == (2, 64, 64, "learned")
    assert (cfg.activation, cfg.scale_embeddings, cfg.logits_bias, cfg.norm_first) == ("gelu_tanh", False, False, True)
    assert cfg.bos_id == cfg.eos_id == cfg.pad_id == 100 and cfg.suppress_ids == []
    assert gpt2.info["model_type"] == "gpt2" and gpt2.info["parameters"] == gpt2.model.num_parameters()


def test_gpt2_logits_and_every_attention_weight_equal_transformers(gpt2):
    ids = torch.tensor(PROMPTS)
    with torch.no_grad():
        ref = gpt2.reference(input_ids=ids, output_attentions=True)
        out = gpt2.model.decode(ids, trace=True)
        _close(gpt2.model.logits(out.hidden), ref.logits)
        _close(gpt2.model(None, ids), ref.logits)
    assert len(out.self_weights) == len(ref.attentions) == 2
    for ours, theirs in zip(out.self_weights, ref.attentions, strict=True):
        _close(ours, theirs)


def test_gpt2_cached_steps_equal_the_full_forward(gpt2):
    ids = torch.tensor(PROMPTS[:1])
    cache = gpt2.model.new_cache()
    with torch.no_grad():
        ref = gpt2.reference(input_ids=ids, output_attentions=True)
        for t in range(ids.size(1)):
            out = gpt2.model.decode(ids[:, t: t + 1], cache=cache, trace=True)
            _close(gpt2.model.logits(out.hidden)[0, 0], ref.logits[0, t])
            for layer in range(2):
                _close(out.self_weights[layer][0, :, 0], ref.attentions[layer][0, :, t, : t + 1])


def _gpt2_generate(gpt2, prompt: list[int], max_new_tokens: int, eos: int) -> list[int]:
    ids = torch.tensor([prompt])
    out = gpt2.reference.generate(input_ids=ids, attention_mask=torch.ones_like(ids), do_sample=False, num_beams=1,
                                  max_new_tokens=max_new_tokens, eos_token_id=eos, pad_token_id=eos,
                                  min_length=0, repetition_penalty=1.0, no_repeat_ngram_size=0)
    return out[0, len(prompt):].tolist()


@pytest.mark.parametrize("eos", ["config", "varied"])
def test_gpt2_greedy_equals_generate(gpt2, monkeypatch, eos):
    eos_id = gpt2.cfg.eos_id
    if eos == "varied":  # a token the model says, so that the decoding stops early at it
        eos_id = _gpt2_generate(gpt2, PROMPTS[0], 12, eos_id)[3]
        monkeypatch.setattr(gpt2.model, "cfg", dataclasses.replace(gpt2.cfg, eos_id=eos_id))
    for prompt in PROMPTS:
        stepper = Stepper(gpt2.model, prefix_ids=prompt, max_new_tokens=12)
        stepper.run_to_end()
        assert stepper.generated == _gpt2_generate(gpt2, prompt, 12, eos_id)
    if eos == "varied":
        assert stepper.generated[-1] == eos_id or len(stepper.generated) == 12


# --- files and errors -----------------------------------------------------------------------------------------
def _copy_config(src: Path, dst: Path, **changes) -> None:
    dst.mkdir(parents=True, exist_ok=True)
    config = json.loads((src / "config.json").read_text())
    (dst / "config.json").write_text(json.dumps({**config, **changes}))


def _same_logits(a, b, cfg) -> None:
    tgt = _targets(cfg, 1, 5, seed=5)
    src = torch.tensor([SOURCES[0]]) if cfg.is_encoder_decoder else None
    with torch.no_grad():
        _close(a(src, tgt), b(src, tgt))


def test_pytorch_model_bin_loads_with_weights_only(marian, gpt2, tmp_path):
    # Marian: the full state dict, with tied copies and the stored positional tables, as old opus-mt files have.
    _copy_config(marian.folder, tmp_path / "m")
    torch.save(marian.reference.state_dict(), tmp_path / "m" / "pytorch_model.bin")
    model, cfg, info = load_hf_model(tmp_path / "m")
    assert info["weights_file"] == "pytorch_model.bin" and cfg == marian.cfg
    _same_logits(model, marian.model, cfg)
    # GPT-2: keys without "transformer." and with the causal-mask buffers, as the original gpt2 file has.
    _copy_config(gpt2.folder, tmp_path / "g")
    state = {k.removeprefix("transformer."): v for k, v in gpt2.reference.state_dict().items()}
    state["h.0.attn.bias"] = torch.tril(torch.ones(1, 1, 64, 64, dtype=torch.bool))
    state["h.0.attn.masked_bias"] = torch.tensor(-1e4)
    torch.save(state, tmp_path / "g" / "pytorch_model.bin")
    model, cfg, _ = load_hf_model(tmp_path / "g")
    _same_logits(model, gpt2.model, cfg)


_UNPICKLED = []


class _Payload:
    """Unpickling it would run code (append to a list); ``weights_only`` must refuse it."""

    def __reduce__(self):
        return _UNPICKLED.append, ("ran",)


def test_a_pickle_with_code_is_refused(marian, tmp_path):
    _copy_config(marian.folder, tmp_path)
    torch.save({"model.shared.weight": torch.zeros(2), "x": _Payload()}, tmp_path / "pytorch_model.bin")
    with pytest.raises(CheckpointError, match="corrupt or unreadable"):
        load_hf_model(tmp_path)
    assert _UNPICKLED == []


@pytest.mark.parametrize("case,match", [
    ("corrupt", "corrupt or unreadable"),
    ("truncated", "corrupt or unreadable"),
    ("no weights", "no weights file"),
    ("no config", "config.json is missing"),
    ("bad config", "unreadable"),
    ("bert", "model_type 'bert' is not supported.*marian and gpt2"),
    ("own vocabularies", "separate source and target vocabularies"),
    ("decoder vocab", "separate source and target vocabularies"),
    ("heads differ", "encoder_attention_heads"),
    ("activation", "activation_function 'tanh'"),
    ("wrong shapes", "do not fit config.json"),
])
def test_errors_are_checkpoint_errors_with_plain_messages(marian, tmp_path, case, match):
    folder = tmp_path / "model"
    changes = {"bert": {"model_type": "bert"}, "own vocabularies": {"share_encoder_decoder_embeddings": False},
               "decoder vocab": {"decoder_vocab_size": 50}, "heads differ": {"decoder_attention_heads": 2},
               "activation": {"activation_function": "tanh"}, "wrong shapes": {"d_model": 32}}.get(case, {})
    _copy_config(marian.folder, folder, **changes)
    weights = (marian.folder / "model.safetensors").read_bytes()
    if case == "corrupt":
        weights = b"\x00\x01 not a safetensors file" * 10
    elif case == "truncated":
        weights = weights[: len(weights) // 2]
    if case != "no weights":
        (folder / "model.safetensors").write_bytes(weights)
    if case == "no config":
        (folder / "config.json").unlink()
    elif case == "bad config":
        (folder / "config.json").write_text("{not json")
    with pytest.raises(CheckpointError, match=match):
        load_hf_model(folder)


def test_missing_folder_and_missing_tensor(marian, gpt2, tmp_path):
    with pytest.raises(CheckpointError, match="not found"):
        load_hf_model(tmp_path / "nowhere")
    _copy_config(gpt2.folder, tmp_path / "g")
    state = dict(gpt2.reference.state_dict())
    del state["transformer.ln_f.bias"]
    torch.save(state, tmp_path / "g" / "pytorch_model.bin")
    with pytest.raises(CheckpointError, match="ln_f.bias is missing"):
        load_hf_model(tmp_path / "g")


def test_is_hf_model_dir(marian, gpt2, tmp_path, make_model, tokenizer):
    assert is_hf_model_dir(marian.folder) and is_hf_model_dir(gpt2.folder)
    ours = save_checkpoint(tmp_path / "ours", make_model(), tokenizer)
    assert not is_hf_model_dir(ours)  # our own checkpoint: no model_type
    _copy_config(marian.folder, tmp_path / "no-weights")
    assert not is_hf_model_dir(tmp_path / "no-weights") and not is_hf_model_dir(tmp_path / "nowhere")


def test_config_defaults_are_the_transformers_classes_defaults():
    """A config.json that leaves keys out gets MarianConfig's / GPT2Config's defaults."""
    from transformers import GPT2Config, MarianConfig

    marian = hf_to_model_config({"model_type": "marian"})
    ref = MarianConfig()
    assert (marian.vocab_size, marian.d_model, marian.n_heads, marian.d_ff) == (
        ref.vocab_size, ref.d_model, ref.encoder_attention_heads, ref.encoder_ffn_dim)
    assert (marian.max_len, marian.pad_id, marian.eos_id, marian.activation) == (
        ref.max_position_embeddings, ref.pad_token_id, ref.eos_token_id, "gelu")
    assert marian.scale_embeddings is ref.scale_embedding
    gpt = hf_to_model_config({"model_type": "gpt2"})
    ref = GPT2Config()
    assert (gpt.vocab_size, gpt.d_model, gpt.n_heads, gpt.n_decoder_layers, gpt.max_len, gpt.eos_id) == (
        ref.vocab_size, ref.n_embd, ref.n_head, ref.n_layer, ref.n_positions, ref.eos_token_id)
    assert gpt.d_ff == 4 * ref.n_embd and gpt.norm_eps == ref.layer_norm_epsilon


def test_model_package_never_imports_transformers():
    """``transformers`` is a test dependency: the app runs Hugging Face models with our own code."""
    offenders = []
    for path in sorted((ROOT / "model").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
                [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            offenders += [str(path.relative_to(ROOT)) for n in names if n.split(".")[0] == "transformers"]
    assert not offenders
