"""Tiny Hugging Face model folders built offline, for the equivalence and page tests.

Nothing is downloaded: the models are random ``transformers`` models with a few layers, saved with
``save_pretrained(..., safe_serialization=True)``, and the tokenizers are trained here from a few lines of text.
The folders look exactly like a ``huggingface-cli download`` of ``Helsinki-NLP/opus-mt-*`` or ``gpt2``.
"""

from __future__ import annotations

# --- tokenizers (SentencePiece unigram for Marian, byte-level BPE for GPT-2) --------------------------------
import io as _io
import json as _json
from pathlib import Path as _Path

#: English and German lines the tiny tokenizers learn from (umlauts, ß and é included; no emoji, CJK or "<>|").
TOKENIZER_LINES = [
    "The cat sat on the mat.",
    "Die Katze saß auf der Matte.",
    "I like green apples and red cherries.",
    "Ich mag grüne Äpfel und rote Kirschen.",
    "Where is the train station?",
    "Wo ist der Bahnhof?",
    "My brother works in a small bakery.",
    "Mein Bruder arbeitet in einer kleinen Bäckerei.",
    "We are going to the market tomorrow.",
    "Wir gehen morgen auf den Markt.",
    "The weather is nice today.",
    "Das Wetter ist heute schön.",
    "She reads a book every evening.",
    "Sie liest jeden Abend ein Buch.",
    "Children play football in the park.",
    "Kinder spielen Fußball im Park.",
    "He drinks coffee with milk at 8 o'clock.",
    "Er trinkt um 8 Uhr Kaffee mit Milch.",
    "The house on the hill is 200 years old.",
    "Das Haus auf dem Hügel ist 200 Jahre alt.",
    "Please open the window, it is warm!",
    "Bitte öffne das Fenster, es ist warm!",
    "Mr Müller drinks his coffee in the café on Main Street.",
    "Herr Müller trinkt im Café in der Hauptstraße.",
    "Music makes people happy; dancing too.",
    "Musik macht Menschen glücklich; Tanzen auch.",
    "Thank you very much (really).",
    "Vielen Dank (wirklich).",
    "The 3 dogs sleep - quietly.",
    "Die 3 Hunde schlafen - leise.",
]


def _train_unigram(lines: list[str], vocab_size: int) -> bytes:
    import sentencepiece as spm

    out = _io.BytesIO()
    # Marian's own SentencePiece models have no <s> and put </s> at 0 and <unk> at 1, like its vocab.json.
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(lines),
        model_writer=out,
        model_type="unigram",
        vocab_size=vocab_size,
        hard_vocab_limit=False,
        character_coverage=1.0,
        eos_id=0,
        unk_id=1,
        bos_id=-1,
        pad_id=-1,
        num_threads=1,
        minloglevel=2,
    )
    return out.getvalue()


def write_tiny_marian_tokenizer(folder: _Path) -> dict:
    """Write ``source.spm``, ``target.spm``, ``vocab.json`` and ``tokenizer_config.json`` as in an
    ``opus-mt-en-de`` download: two small SentencePiece unigram models (the source learned on all lines, the target
    on the German ones) and one shared vocabulary, ``</s>`` = 0, ``<unk>`` = 1, a ``>>de<<`` language code, the
    union of both models' pieces, ``<pad>`` last.

    Returns ``{"pad_id", "eos_id", "unk_id", "vocab_size"}``.
    """
    import sentencepiece as spm

    folder = _Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    source = _train_unigram(TOKENIZER_LINES, 120)
    target = _train_unigram(TOKENIZER_LINES[1::2], 100)
    (folder / "source.spm").write_bytes(source)
    (folder / "target.spm").write_bytes(target)
    vocab = {"</s>": 0, "<unk>": 1, ">>de<<": 2}
    for blob in (source, target):
        sp = spm.SentencePieceProcessor(model_proto=blob)
        for i in range(sp.get_piece_size()):
            if not (sp.is_control(i) or sp.is_unknown(i)):
                vocab.setdefault(sp.id_to_piece(i), len(vocab))
    vocab["<pad>"] = len(vocab)
    (folder / "vocab.json").write_text(_json.dumps(vocab, ensure_ascii=False, indent=2), encoding="utf-8")
    (folder / "tokenizer_config.json").write_text(
        _json.dumps({"source_lang": "en", "target_lang": "de"}), encoding="utf-8"
    )
    return {"pad_id": vocab["<pad>"], "eos_id": 0, "unk_id": 1, "vocab_size": len(vocab)}


def write_tiny_gpt2_tokenizer(folder: _Path, vocab_size: int = 400) -> dict:
    """Write ``tokenizer.json``, ``vocab.json`` and ``merges.txt`` as in a ``gpt2`` download: a byte-level BPE
    (ByteLevel pre-tokenizer, decoder and post-processor, no ``<unk>``) learned from a few lines, with
    ``<|endoftext|>`` as its last id.

    Returns ``{"eos_id", "bos_id", "vocab_size"}`` (GPT-2 has no padding or unknown token of its own).
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    folder = _Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size - 1,
        min_frequency=1,
        show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(TOKENIZER_LINES, trainer=trainer)
    tok.add_special_tokens(["<|endoftext|>"])
    tok.save(str(folder / "tokenizer.json"))
    tok.model.save(str(folder))  # vocab.json + merges.txt, without the added token
    vocab = _json.loads((folder / "vocab.json").read_text(encoding="utf-8"))
    eos = tok.token_to_id("<|endoftext|>")
    vocab["<|endoftext|>"] = eos  # gpt2's vocab.json lists it (id 50256)
    (folder / "vocab.json").write_text(_json.dumps(vocab, ensure_ascii=False), encoding="utf-8")
    return {"eos_id": eos, "bos_id": eos, "vocab_size": tok.get_vocab_size()}


# --- models (MarianMTModel, GPT2LMHeadModel) -----------------------------------------------------------------
#: Sizes of the tiny reference models: 2 + 2 layers, d_model 16, 4 heads (the page tests may pass the tokenizer's).
TINY_MARIAN = dict(
    d_model=16,
    encoder_layers=2,
    decoder_layers=2,
    encoder_attention_heads=4,
    decoder_attention_heads=4,
    encoder_ffn_dim=32,
    decoder_ffn_dim=32,
    max_position_embeddings=64,
)
TINY_GPT2 = dict(n_positions=64, n_embd=16, n_layer=2, n_head=4)


def _randomise(model, seed: int, skip: tuple[str, ...] = (), embed_std: float = 0.35) -> None:
    """Every weight drawn anew, LayerNorms and biases included (fresh ones are 1 and 0, which would hide a
    misplaced tensor), large enough that attention is peaked and the logits differ clearly between tokens.
    Token embeddings (and their tied copies) get ``embed_std``."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, t in model.state_dict().items():  # tied copies share storage: the last draw is everyone's
            if any(s in name for s in skip) or not t.is_floating_point():
                continue
            noise = torch.randn(t.shape, generator=gen)
            if name.endswith("norm.weight") or (".ln_" in name and name.endswith(".weight")):
                t.copy_(1.0 + 0.2 * noise)
            elif any(e in name for e in ("shared", "embed_tokens", "lm_head", "wte")):
                t.copy_(embed_std * noise)
            else:
                t.copy_(0.35 * noise)


def tiny_marian(vocab_size: int = 97, pad_id: int | None = None, eos_id: int = 0, seed: int = 0, **overrides):
    """A random ``MarianMTModel`` in eval mode with eager attention (so that it returns attention weights), as
    opus-mt configures it: SiLU ("swish"), scaled embeddings, ``<pad>`` (the last id unless given) as decoder start
    token, ``</s>`` = ``eos_id``, a non-zero ``final_logits_bias``."""
    from transformers import MarianConfig, MarianMTModel

    pad = vocab_size - 1 if pad_id is None else pad_id
    config = MarianConfig(
        vocab_size=vocab_size,
        pad_token_id=pad,
        decoder_start_token_id=pad,
        eos_token_id=eos_id,
        forced_eos_token_id=eos_id,
        activation_function="swish",
        scale_embedding=True,
        dropout=0.1,
        attn_implementation="eager",
        **{**TINY_MARIAN, **overrides},
    )
    model = MarianMTModel(config)
    _randomise(model, seed, skip=("embed_positions",))  # the sinusoidal table is fixed, not learned
    return model.eval()


def write_tiny_marian_model(
    folder: _Path, vocab_size: int = 97, pad_id: int | None = None, eos_id: int = 0, seed: int = 0, **overrides
):
    """Save :func:`tiny_marian` to ``folder`` (``config.json``, ``generation_config.json``, ``model.safetensors``)
    and return the model. ``config.json`` also gets the generation keys of a real opus-mt download
    (``bad_words_ids`` = [[pad]], ``num_beams``, ``max_length``) and its legacy BART keys, which the loader must
    tolerate."""
    model = tiny_marian(vocab_size, pad_id, eos_id, seed, **overrides)
    model.save_pretrained(folder, safe_serialization=True)
    path = _Path(folder) / "config.json"
    config = _json.loads(path.read_text(encoding="utf-8"))
    config.update(
        {
            "_name_or_path": "tiny/opus-mt-en-de",
            "bad_words_ids": [[model.config.pad_token_id]],
            "num_beams": 4,
            "max_length": 64,
            "normalize_before": False,
            "normalize_embedding": False,
            "static_position_embeddings": True,
            "add_bias_logits": False,
        }
    )
    path.write_text(_json.dumps(config, indent=2), encoding="utf-8")
    return model


def tiny_gpt2(vocab_size: int = 101, eos_id: int | None = None, seed: int = 0, **overrides):
    """A random ``GPT2LMHeadModel`` in eval mode with eager attention; ``<|endoftext|>`` (bos = eos) is the last id
    unless given, as in ``gpt2``."""
    from transformers import GPT2Config, GPT2LMHeadModel

    eos = vocab_size - 1 if eos_id is None else eos_id
    config = GPT2Config(
        vocab_size=vocab_size,
        bos_token_id=eos,
        eos_token_id=eos,
        attn_implementation="eager",
        **{**TINY_GPT2, **overrides},
    )
    model = GPT2LMHeadModel(config)
    _randomise(model, seed)
    return model.eval()


def write_tiny_gpt2_model(folder: _Path, vocab_size: int = 101, eos_id: int | None = None, seed: int = 0, **overrides):
    """Save :func:`tiny_gpt2` to ``folder`` (``config.json``, ``generation_config.json``, ``model.safetensors``)
    and return the model."""
    model = tiny_gpt2(vocab_size, eos_id, seed, **overrides)
    model.save_pretrained(folder, safe_serialization=True)
    return model


#: The folder names of the two tiny models under a checkpoints root.
MARIAN, GPT2 = "opus-mt-tiny", "gpt2-tiny"


def write_hf_root(root: _Path):
    """Tiny ``opus-mt-tiny`` (MarianMT) and ``gpt2-tiny`` folders under ``root``, as ``huggingface-cli download``
    writes them. Returns ``(root, {name: the reference transformers model})``."""
    marian_tok = write_tiny_marian_tokenizer(root / MARIAN)
    marian = write_tiny_marian_model(
        root / MARIAN, vocab_size=marian_tok["vocab_size"], pad_id=marian_tok["pad_id"], eos_id=marian_tok["eos_id"]
    )
    gpt2_tok = write_tiny_gpt2_tokenizer(root / GPT2)
    gpt2 = write_tiny_gpt2_model(root / GPT2, vocab_size=gpt2_tok["vocab_size"], eos_id=gpt2_tok["eos_id"])
    (root / MARIAN / "README.md").write_text("---\nlanguage: [en, de]\nlicense: cc-by-4.0\n---\n# opus-mt-tiny\n")
    return root, {MARIAN: marian, GPT2: gpt2}
