"""ModelConfig validation and JSON round-trip; safetensors checkpoint folders (save, load, errors, listing)."""

from __future__ import annotations

import json
import struct

import pytest
import torch
from safetensors import safe_open

from model.checkpoint import (
    CheckpointError,
    is_checkpoint_dir,
    list_checkpoints,
    load_checkpoint,
    model_state,
    save_checkpoint,
)
from model.config import ConfigError, ModelConfig


# --- config ----------------------------------------------------------------------------------------------------
def test_config_json_round_trip(tmp_path):
    cfg = ModelConfig(
        arch="decoder-only",
        vocab_size=123,
        d_model=48,
        n_heads=6,
        n_encoder_layers=0,
        n_decoder_layers=3,
        d_ff=96,
        dropout=0.2,
        pos_encoding="learned",
        norm_first=True,
        tie_embeddings=False,
        max_len=77,
    )
    cfg.to_json(tmp_path / "config.json")
    back = ModelConfig.from_json(tmp_path / "config.json")
    assert back == cfg
    assert back != ModelConfig()
    assert json.loads((tmp_path / "config.json").read_text())["d_model"] == 48
    assert ModelConfig.from_dict(cfg.to_dict()) == cfg
    assert cfg.d_k == 8 and not cfg.is_encoder_decoder


def test_config_partial_json_uses_defaults(tmp_path):
    (tmp_path / "c.json").write_text('{"d_model": 64, "n_heads": 8}')
    cfg = ModelConfig.from_json(tmp_path / "c.json")
    assert cfg.d_model == 64 and cfg.n_heads == 8 and cfg.vocab_size == ModelConfig().vocab_size


@pytest.mark.parametrize(
    "kwargs,match",
    [
        (dict(d_model=30, n_heads=4), "divisible"),
        (dict(arch="encoder-only"), "arch"),
        (dict(pos_encoding="rope", d_model=24, n_heads=8), "even d_k"),  # d_k = 3
        (dict(pos_encoding="alibi"), None),  # implemented: valid
        (dict(pos_encoding="fourier"), "pos_encoding"),
        (dict(d_model=18, n_heads=2), None),  # 18 is even: valid
        (dict(d_model=9, n_heads=3), "even"),  # sinusoidal needs an even width
        (dict(vocab_size=0), "vocab_size"),
        (dict(n_heads=-1), "n_heads"),
        (dict(n_encoder_layers=0), "n_encoder_layers"),
        (dict(dropout=1.0), "dropout"),
        (dict(attention_dropout=-0.1), "dropout"),
        (dict(d_model="abc"), "d_model"),
        (dict(max_len=64.5), "max_len"),
        (dict(activation="tanh"), "activation"),
        (
            dict(
                activation="silu",
                pos_layout="halves",
                scale_embeddings=False,
                logits_bias=True,
                norm_eps=1e-6,
                suppress_ids=[0],
            ),
            None,
        ),  # a Hugging Face variant: valid
        (dict(pos_layout="columns"), "pos_layout"),
        (dict(pos_layout="halves", pos_encoding="learned"), "sinusoidal encodings only"),
        (dict(scale_embeddings=1), "scale_embeddings"),
        (dict(logits_bias="yes"), "logits_bias"),
        (dict(norm_eps=0.0), "norm_eps"),
        (dict(suppress_ids=[9000]), "outside the vocabulary"),
        (dict(suppress_ids=[2]), "eos_id"),
        (dict(suppress_ids=(0,)), "list of token ids"),
    ],
)
def test_invalid_configs_raise_config_error(kwargs, match):
    if match is None:
        ModelConfig(**kwargs)
        return
    with pytest.raises(ConfigError, match=match):
        ModelConfig(**kwargs)


def test_configs_without_the_pretrained_model_fields_load_as_our_architecture(tmp_path):
    """A config.json written before activation … suppress_ids existed describes this project's Transformer."""
    old = {
        k: v
        for k, v in ModelConfig().to_dict().items()
        if k not in ("activation", "pos_layout", "scale_embeddings", "logits_bias", "norm_eps", "suppress_ids")
    }
    cfg = ModelConfig.from_dict(old)
    assert (cfg.activation, cfg.pos_layout, cfg.scale_embeddings, cfg.logits_bias) == (
        "relu",
        "interleaved",
        True,
        False,
    )
    assert cfg.norm_eps == 1e-5 and cfg.suppress_ids == []
    variant = ModelConfig(activation="gelu_tanh", suppress_ids=[0, 5], logits_bias=True)
    variant.to_json(tmp_path / "c.json")
    assert ModelConfig.from_json(tmp_path / "c.json") == variant


def test_decoder_only_needs_no_encoder_layers():
    cfg = ModelConfig(arch="decoder-only", n_encoder_layers=0)
    assert not cfg.is_encoder_decoder


def test_unknown_keys_are_refused(tmp_path):
    with pytest.raises(ConfigError, match="unknown config keys.*d_modle"):
        ModelConfig.from_dict({"d_modle": 64})
    (tmp_path / "c.json").write_text(json.dumps({**ModelConfig().to_dict(), "layers": 3}))
    with pytest.raises(ConfigError, match="layers"):
        ModelConfig.from_json(tmp_path / "c.json")


@pytest.mark.parametrize("content", ["{not json", "[1, 2, 3]", '{"d_model": 30}', '{"d_model": "wide"}', ""])
def test_from_json_bad_content_raises_config_error(tmp_path, content):
    (tmp_path / "c.json").write_text(content)
    with pytest.raises(ConfigError):
        ModelConfig.from_json(tmp_path / "c.json")


def test_from_json_missing_file(tmp_path):
    with pytest.raises(ConfigError, match="cannot read"):
        ModelConfig.from_json(tmp_path / "nope.json")


# --- checkpoints ------------------------------------------------------------------------------------------------
@pytest.fixture()
def model_and_batch(make_model):
    model = make_model(seed=3)
    src = torch.tensor([[5, 9, 14, 20, 2], [7, 8, 2, 0, 0]])
    tgt = torch.tensor([[1, 30, 31, 32], [1, 40, 0, 0]])
    return model, src, tgt


def _logits(model, src, tgt):
    with torch.no_grad():
        return model(src, tgt)


@pytest.mark.parametrize("variant", [dict(), dict(tie_embeddings=False, pos_encoding="learned", norm_first=True)])
def test_save_load_round_trip_identical_logits(tmp_path, make_model, tokenizer, variant):
    model = make_model(seed=4, **variant)
    src = torch.tensor([[5, 9, 14, 20, 2]])
    tgt = torch.tensor([[1, 30, 31, 32]])
    card = {"task": "test", "valid": {"bleu": 1.5}}
    folder = save_checkpoint(tmp_path / "ckpt", model, tokenizer, card)
    ckpt = load_checkpoint(folder)
    assert ckpt.config == model.cfg and ckpt.card == card and ckpt.path == folder
    assert not ckpt.model.training
    assert torch.equal(_logits(ckpt.model, src, tgt), _logits(model, src, tgt))
    for name, t in model.state_dict().items():
        assert torch.equal(ckpt.model.state_dict()[name], t), name
    if model.cfg.tie_embeddings:
        assert ckpt.model.generator.weight is ckpt.model.embed.weight  # re-tied on load
    else:
        assert ckpt.model.generator.weight is not ckpt.model.embed.weight
    assert ckpt.tokenizer.encode("Das Haus ist groß.").ids == tokenizer.encode("Das Haus ist groß.").ids


def test_fp16_checkpoint_logits_close(tmp_path, model_and_batch, tokenizer):
    model, src, tgt = model_and_batch
    save_checkpoint(tmp_path / "fp32", model, tokenizer)
    save_checkpoint(tmp_path / "fp16", model, tokenizer, dtype=torch.float16)
    with safe_open(str(tmp_path / "fp16" / "model.safetensors"), "pt") as f:
        assert {f.get_tensor(k).dtype for k in f.keys()} == {torch.float16}
    size16 = (tmp_path / "fp16" / "model.safetensors").stat().st_size
    size32 = (tmp_path / "fp32" / "model.safetensors").stat().st_size
    assert size16 < 0.6 * size32
    ckpt = load_checkpoint(tmp_path / "fp16")
    assert ckpt.model.embed.weight.dtype == torch.float32  # loaded for inference in fp32
    ref = _logits(model, src, tgt)
    got = _logits(ckpt.model, src, tgt)
    torch.testing.assert_close(got, ref, atol=1e-2, rtol=0)
    assert not torch.equal(got, ref)  # it really went through fp16


def test_safetensors_file_holds_no_pickle(tmp_path, model_and_batch, tokenizer):
    model, _, _ = model_and_batch
    folder = save_checkpoint(tmp_path / "ckpt", model, tokenizer)
    raw = (folder / "model.safetensors").read_bytes()
    assert not raw.startswith(b"\x80") and not raw.startswith(b"PK")  # neither a pickle nor torch's zip
    (header_len,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + header_len])
    assert header["__metadata__"] == {"format": "pt"}
    expected = model_state(model)
    assert "generator.weight" not in expected  # the tied projection is not stored twice
    with safe_open(str(folder / "model.safetensors"), framework="pt") as f:
        assert set(f.keys()) == set(expected)
        for k in f.keys():
            assert torch.equal(f.get_tensor(k), expected[k])
    assert not list(folder.glob("*.tmp"))  # atomic writes leave no temporary files
    assert json.loads((folder / "card.json").read_text()) == {}


def test_load_missing_folder(tmp_path):
    with pytest.raises(CheckpointError, match="Checkpoint folder not found"):
        load_checkpoint(tmp_path / "does-not-exist")


@pytest.mark.parametrize("missing", ["model.safetensors", "config.json", "tokenizer.json"])
def test_load_folder_missing_a_file(tmp_path, model_and_batch, tokenizer, missing):
    model, _, _ = model_and_batch
    folder = save_checkpoint(tmp_path / "ckpt", model, tokenizer)
    (folder / missing).unlink()
    with pytest.raises(CheckpointError, match=f"not a checkpoint: missing {missing}"):
        load_checkpoint(folder)


@pytest.mark.parametrize("damage", ["garbage", "truncated", "tiny", "empty"])
def test_load_corrupted_weights(tmp_path, model_and_batch, tokenizer, damage):
    model, _, _ = model_and_batch
    folder = save_checkpoint(tmp_path / "ckpt", model, tokenizer)
    path = folder / "model.safetensors"
    raw = path.read_bytes()
    path.write_bytes(
        {"garbage": b"\x13\x37garbage" * 500, "truncated": raw[: len(raw) // 2], "tiny": raw[:5], "empty": b""}[damage]
    )
    with pytest.raises(CheckpointError, match="model.safetensors is corrupt or unreadable"):
        load_checkpoint(folder)


@pytest.mark.parametrize(
    "content,match",
    [
        ("{broken", "config.json is invalid"),
        ('{"d_model": 32, "typo": 1}', "unknown config keys"),
        ('{"d_model": "wide"}', "config.json is invalid"),
        ('{"pos_encoding": "rope", "d_model": 24, "n_heads": 8}', "even d_k"),
    ],
)
def test_load_invalid_config(tmp_path, model_and_batch, tokenizer, content, match):
    model, _, _ = model_and_batch
    folder = save_checkpoint(tmp_path / "ckpt", model, tokenizer)
    (folder / "config.json").write_text(content)
    with pytest.raises(CheckpointError, match=match):
        load_checkpoint(folder)


def test_load_invalid_tokenizer(tmp_path, model_and_batch, tokenizer):
    model, _, _ = model_and_batch
    folder = save_checkpoint(tmp_path / "ckpt", model, tokenizer)
    (folder / "tokenizer.json").write_text("not a tokenizer")
    with pytest.raises(CheckpointError, match="tokenizer.json is invalid"):
        load_checkpoint(folder)


def test_load_tokenizer_vocab_mismatch(tmp_path, model_and_batch, tokenizer):
    model, _, _ = model_and_batch
    folder = save_checkpoint(tmp_path / "ckpt", model, tokenizer)
    cfg = json.loads((folder / "config.json").read_text())
    cfg["vocab_size"] += 1
    (folder / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(CheckpointError, match="tokenizer has"):
        load_checkpoint(folder)


@pytest.mark.parametrize(
    "change,match",
    [
        (dict(d_model=64), "do not fit the config"),  # same names, other shapes
        (dict(n_encoder_layers=3), "do not match the config"),  # layer 2 missing from the weights
        (dict(n_decoder_layers=1), "do not match the config"),  # unexpected layer-1 weights
        (dict(tie_embeddings=False), "do not match the config"),  # generator.weight missing
        (dict(pos_encoding="learned"), "do not match the config"),  # pos.table missing
    ],
)
def test_load_weights_from_a_different_config(tmp_path, model_and_batch, tokenizer, change, match):
    model, _, _ = model_and_batch
    folder = save_checkpoint(tmp_path / "ckpt", model, tokenizer)
    cfg = {**model.cfg.to_dict(), **change}
    (folder / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(CheckpointError, match=match):
        load_checkpoint(folder)


def test_list_checkpoints_finds_only_valid_folders(tmp_path, model_and_batch, tokenizer):
    model, _, _ = model_and_batch
    root = tmp_path / "checkpoints"
    for name in ("b-model", "a-model"):
        save_checkpoint(root / name, model, tokenizer)
    incomplete = save_checkpoint(root / "c-incomplete", model, tokenizer)
    (incomplete / "tokenizer.json").unlink()
    (root / "empty").mkdir()
    (root / "notes.txt").write_text("not a folder")
    (root / "d-file-named-like-a-dir").mkdir()
    (root / "d-file-named-like-a-dir" / "model.safetensors").mkdir()  # a directory, not a file

    assert list_checkpoints(root) == [root / "a-model", root / "b-model"]
    assert list_checkpoints(root / "a-model") == [root / "a-model"]  # the root itself
    assert list_checkpoints(tmp_path / "missing") == []
    assert is_checkpoint_dir(root / "b-model") and not is_checkpoint_dir(incomplete)
