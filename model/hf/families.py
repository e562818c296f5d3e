"""The Hugging Face model families this explorer opens, in one place: what each ``model_type`` is.

Everything that depends on the family looks it up here: which ``model_type`` values are accepted
(:func:`family`, whose error lists them), the architecture a folder is read as without loading it
(:func:`model.checkpoint.checkpoint_arch`), the card's ``transformers`` class and authors (:mod:`model.hf.card`)
and the tokenizer that reads the folder (:func:`model.hf.tokenizers.load_hf_tokenizer`, by ``tokenizer``). The
config and weight translations (:mod:`model.hf.config`, :mod:`model.hf.weights`) have one function per family;
``tests/test_hf_generation.py`` checks that every family here has them.
"""

from __future__ import annotations

from dataclasses import dataclass

from model.config import ConfigError


@dataclass(frozen=True)
class Family:
    """One supported ``model_type``.

    Attributes:
        model_type: ``config.json``'s ``model_type``.
        what: the family in words, plural (``"MarianMT translators"``), for messages.
        arch: our ``ModelConfig.arch``: ``"encoder-decoder"`` or ``"decoder-only"``.
        architecture: the ``transformers`` class its weights were saved from.
        trained_by: who trained it, in one honest clause (for the card).
        tokenizer: the kind of its tokenizer (:data:`model.tokenizing.KINDS`).
    """

    model_type: str
    what: str
    arch: str
    architecture: str
    trained_by: str
    tokenizer: str


#: ``model_type`` → its :class:`Family`.
FAMILIES: dict[str, Family] = {
    f.model_type: f
    for f in (
        Family(
            "marian",
            "MarianMT translators",
            "encoder-decoder",
            "MarianMTModel",
            "trained by its authors on GPUs (OPUS-MT: Tiedemann & Thottingal 2020), not here",
            "unigram",
        ),
        Family(
            "gpt2",
            "GPT-2 language models",
            "decoder-only",
            "GPT2LMHeadModel",
            "trained by its authors at OpenAI (Radford et al. 2019), not here",
            "byte-bpe",
        ),
    )
}


def family(model_type) -> Family:
    """The :class:`Family` of a ``model_type``. Raises :class:`~model.config.ConfigError` naming the supported
    ones when there is none."""
    if model_type not in FAMILIES:
        names = " and ".join(FAMILIES)
        whats = ", ".join(f.what for f in FAMILIES.values())
        raise ConfigError(f"model_type {model_type!r} is not supported; this explorer runs {names} models ({whats})")
    return FAMILIES[model_type]
