"""The supported Hugging Face families have one home (``model/hf/families.py``): every part of the loader reads
each of them, and everything that names them (the accepted ``model_type`` values, a folder's architecture, the
card's class and authors, the tokenizer kind) takes them from there."""

from __future__ import annotations

import json

import pytest

from model import checkpoint
from model.checkpoint import checkpoint_arch
from model.config import ConfigError
from model.hf import config as hf_config
from model.hf import weights
from model.hf.card import hf_card
from model.hf.families import FAMILIES, family
from model.hf.tokenizers import BY_KIND


def test_every_family_is_read_by_every_part_of_the_loader():
    assert set(FAMILIES) == set(hf_config.TRANSLATE) == set(weights.TRANSLATE) == {"marian", "gpt2"}
    assert {f.tokenizer for f in FAMILIES.values()} == set(BY_KIND)
    assert {f.arch for f in FAMILIES.values()} == {"encoder-decoder", "decoder-only"}


def test_a_folder_is_read_as_its_familys_architecture_and_card(tmp_path):
    for kind, fam in FAMILIES.items():
        (tmp_path / kind).mkdir()
        (tmp_path / kind / "config.json").write_text(json.dumps({"model_type": kind}))
        assert checkpoint_arch(tmp_path / kind) == fam.arch
        card = hf_card(tmp_path / kind, {"model_type": kind, "parameters": 1, "file_bytes": 2, "weights_file": "w"})
        assert card["architecture"] == fam.architecture and card["origin"].endswith(fam.trained_by)


def test_another_model_type_is_refused_naming_the_families():
    with pytest.raises(
        ConfigError,
        match="model_type 'bert' is not supported; this explorer runs marian and gpt2 "
        r"models \(MarianMT translators, GPT-2 language models\)",
    ):
        family("bert")
    with pytest.raises(ConfigError, match="model_type 'bert' is not supported"):
        hf_config.hf_to_model_config({"model_type": "bert"})
    assert not hasattr(checkpoint, "HF_ARCHS") and not hasattr(hf_config, "SUPPORTED_MODEL_TYPES")
