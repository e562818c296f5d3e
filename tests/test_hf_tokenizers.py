"""The tokenizers of Hugging Face MarianMT and GPT-2 folders (``model.hf.tokenizers``) against ``transformers``.

Tiny folders are built offline (``tests/hf_fixtures.py``): a SentencePiece unigram pair with a shared
``vocab.json`` for Marian, a byte-level BPE for GPT-2. Ids and pieces must equal ``MarianTokenizer`` /
``GPT2TokenizerFast`` loaded from the same folder, called with ``split_special_tokens=True``: typed special-token
spellings are plain text here (the module docstring says why); the tests pin that the reference's default differs.
"""

from __future__ import annotations

import json
import random
import shutil
import warnings

import pytest
from hf_fixtures import TOKENIZER_LINES, write_tiny_gpt2_tokenizer, write_tiny_marian_tokenizer

from decoding.stepping import prepare_source
from model.hf.byte_level import BYTE_TO_CHAR, byte_level_text, readable_piece
from model.hf.tokenizers import GPT2TextTokenizer, MarianTextTokenizer, load_hf_tokenizer
from model.tokenizer import unknown_share

transformers = pytest.importorskip("transformers")

LONG = ("Der Hund läuft schnell über die Straße, 42 Mal! " * 250)[:10_000]
TEXTS = [
    "The cat sat on the mat.",
    "Herr Müller trinkt im Café auf der Straße.",
    "Ärger, Öl, Übel, ß, é, è, ñ",
    "cafe\u0301 (combining accent)",
    "It costs 1,234.56 € — or 3/4 of $99.",
    "Wait... what?! (yes); \"quoted\" 'x'",
    "I ❤️ 🙂🐍 emoji",
    "日本語のテキスト and 中文",
    "مرحبا بالعالم",
    "ﬁne ① Ｆｕｌｌ",
    "",
    " ",
    "   \t\n  ",
    "a\tb\nc\rd",
    "bell\x07 and nul\x00 and esc\x1b",
    "zero\u200bwidth\u00a0nbsp",
    "  leading and trailing  ",
    "</s> <pad> <unk> <|endoftext|> <s>",
    ">>de<< The weather is nice.",
    ">>xx<< unknown code",
    "a >>de<< inside",
    ">> spaced << code",
    ">>de<<",
    "<<>>",
    LONG,
]


@pytest.fixture(scope="module")
def marian(tmp_path_factory):
    folder = tmp_path_factory.mktemp("opus-mt-tiny")
    info = write_tiny_marian_tokenizer(folder)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "Recommended: pip install sacremoses" (never used by tokenize)
        ref = transformers.MarianTokenizer.from_pretrained(str(folder))
    return load_hf_tokenizer(folder, "marian"), ref, info, folder


@pytest.fixture(scope="module")
def gpt2(tmp_path_factory):
    folder = tmp_path_factory.mktemp("gpt2-tiny")
    info = write_tiny_gpt2_tokenizer(folder)
    ref = transformers.GPT2TokenizerFast.from_pretrained(str(folder))
    return load_hf_tokenizer(folder, "gpt2"), ref, info, folder


def ref_ids(ref, text: str) -> list[int]:
    return ref(text, add_special_tokens=False, split_special_tokens=True)["input_ids"]


# --- Marian ----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("text", TEXTS)
def test_marian_ids_and_pieces_equal_marian_tokenizer(marian, text):
    tok, ref, _, _ = marian
    enc = tok.encode(text)
    ids = ref_ids(ref, text)
    assert enc.ids == ids
    assert enc.tokens == ref.convert_ids_to_tokens(ids)
    assert tok.encode_batch([text, text]) == [ids, ids]


def test_marian_special_ids_and_sizes_equal_marian_tokenizer(marian):
    tok, ref, info, _ = marian
    assert tok.kind == "unigram" and tok.backend is None and tok.bos_id is None
    assert (tok.unk_id, tok.eos_id, tok.pad_id) == (ref.unk_token_id, ref.eos_token_id, ref.pad_token_id)
    assert (tok.unk_id, tok.eos_id, tok.pad_id, tok.vocab_size) == (
        info["unk_id"],
        info["eos_id"],
        info["pad_id"],
        info["vocab_size"],
    )
    assert tok.vocab_size == ref.vocab_size == len(ref)
    for i in range(tok.vocab_size):
        assert tok.id_to_token(i) == ref.convert_ids_to_tokens(i)
        assert tok.token_to_id(tok.id_to_token(i)) == i
    assert tok.id_to_token(-1) == tok.id_to_token(tok.vocab_size) == "<unk>"
    assert tok.token_to_id("no such piece") is None


def test_marian_decode_equals_marian_tokenizer(marian):
    tok, ref, _, _ = marian
    rng = random.Random(0)
    sequences = [ref_ids(ref, t) + [tok.eos_id, tok.pad_id] for t in TEXTS]
    sequences += [[rng.randrange(tok.vocab_size) for _ in range(rng.randrange(1, 30))] for _ in range(200)]
    for ids in sequences:
        # MarianTokenizer decodes with target.spm when asked to (use_source_tokenizer=False), as we always do;
        # its default for a shared vocabulary is source.spm, which gives the same text for these models.
        assert tok.decode(ids) == ref.decode(ids, skip_special_tokens=True, use_source_tokenizer=False)
        assert tok.decode(ids) == ref.decode(ids, skip_special_tokens=True)


def test_marian_round_trips_what_it_can_read(marian):
    tok, _, _, _ = marian
    for line in TOKENIZER_LINES:
        assert tok.decode(tok.encode(line).ids) == line
    assert tok.decode(tok.encode("  Die   Katze\tsaß  ").ids) == "Die Katze saß"  # SentencePiece folds spaces
    assert tok.decode(tok.encode("Katze 🙂").ids) == "Katze"  # <unk> is skipped, as MarianTokenizer skips it


def test_marian_typed_special_tokens_stay_text(marian):
    tok, ref, _, _ = marian
    text = "A </s> and a <pad> <unk>"
    ours = tok.encode(text).ids
    assert tok.eos_id not in ours and tok.pad_id not in ours
    # the reference's default turns them into the special ids: the deviation this module makes on purpose
    default = ref(text, add_special_tokens=False)["input_ids"]
    assert tok.eos_id in default and tok.pad_id in default


def test_marian_language_code_is_one_token(marian):
    tok, _, _, _ = marian
    code = tok.token_to_id(">>de<<")
    enc = tok.encode(">>de<< Die Katze")
    assert enc.ids[0] == code and enc.tokens[0] == ">>de<<" and enc.offsets[0] == (0, 6)
    assert enc.ids[1:] == tok.encode("Die Katze").ids
    assert [(s - 6, e - 6) for s, e in enc.offsets[1:]] == [(max(s, 0), e) for s, e in tok.encode(" Die Katze").offsets]
    assert tok.encode(">>xx<< Katze").ids[0] == tok.unk_id  # a code missing from vocab.json
    assert code not in tok.encode("Katze >>de<<").ids  # only at the start
    assert tok.decode([code] + tok.encode("Katze").ids) == ">>de<< Katze"  # as MarianTokenizer decodes it


@pytest.mark.parametrize("text", TEXTS)
def test_marian_offsets_index_the_original_text(marian, text):
    tok, _, _, _ = marian
    enc = tok.encode(text)
    ends = [0]
    for piece, (s, e) in zip(enc.tokens, enc.offsets, strict=True):
        assert ends[-1] <= s <= e <= len(text)  # in order, never overlapping
        ends.append(e)
        if s < e and piece not in ("<unk>", ">>de<<") and text[s:e].isascii() and text[s:e].isprintable():
            assert text[s:e].strip() == piece.replace("▁", " ").strip()


def test_marian_offsets_after_normalisation(marian):
    tok, _, _, _ = marian
    text = "Katze saß"
    enc = tok.encode(text)
    assert "".join(text[s:e] for s, e in enc.offsets) == text  # single spaces, nothing normalised: all covered
    enc = tok.encode("ﬁ")  # NFKC: one character, two pieces; the last covers it, the one before is empty
    assert [p.strip("▁") for p in enc.tokens if p.strip("▁")] == ["f", "i"]
    assert enc.offsets[-1] == (0, 1) and all(s == e for s, e in enc.offsets[:-1])
    enc = tok.encode("Katze\x07 saß")  # a removed control character belongs to the piece before it
    assert any(s <= 5 < e for s, e in enc.offsets)
    assert enc.ids == tok.encode("Katze saß").ids


# --- GPT-2 -----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("text", TEXTS)
def test_gpt2_ids_pieces_and_offsets_equal_gpt2_tokenizer_fast(gpt2, text):
    tok, ref, _, _ = gpt2
    enc = tok.encode(text)
    out = ref(text, add_special_tokens=False, split_special_tokens=True, return_offsets_mapping=True)
    assert enc.ids == out["input_ids"]
    assert enc.tokens == ref.convert_ids_to_tokens(out["input_ids"])
    assert enc.offsets == [tuple(o) for o in out["offset_mapping"]]
    assert tok.decode(enc.ids + [tok.eos_id]) == ref.decode(enc.ids + [tok.eos_id], skip_special_tokens=True)
    assert tok.decode(enc.ids) == text  # byte-level BPE loses nothing
    assert tok.encode_batch([text]) == [enc.ids]


def test_gpt2_special_ids_sizes_and_lookup(gpt2):
    tok, ref, info, _ = gpt2
    assert tok.kind == "byte-bpe" and tok.backend is not None and tok.unk_id is None and tok.pad_id is None
    assert tok.eos_id == tok.bos_id == ref.eos_token_id == ref.bos_token_id == info["eos_id"]
    assert tok.vocab_size == len(ref) == info["vocab_size"]
    assert tok.id_to_token(tok.eos_id) == "<|endoftext|>" and tok.token_to_id("<|endoftext|>") == tok.eos_id
    assert tok.id_to_token(-1) == tok.id_to_token(10**6) == "<unk>" and tok.token_to_id("nope!") is None
    assert tok.decode([10**6, -5, tok.eos_id]) == ""


def test_gpt2_typed_endoftext_stays_text(gpt2):
    tok, ref, _, _ = gpt2
    text = "one<|endoftext|>two"
    assert tok.eos_id not in tok.encode(text).ids and tok.decode(tok.encode(text).ids) == text
    assert tok.eos_id in ref(text, add_special_tokens=False)["input_ids"]  # the reference's default differs


def test_gpt2_without_tokenizer_json_reads_vocab_and_merges(gpt2, tmp_path):
    tok, _, _, folder = gpt2
    for name in ("vocab.json", "merges.txt"):
        shutil.copy(folder / name, tmp_path / name)
    fallback = load_hf_tokenizer(tmp_path, "gpt2")
    ref = transformers.GPT2TokenizerFast.from_pretrained(str(tmp_path))
    for text in TEXTS:
        enc = fallback.encode(text)
        assert enc.ids == tok.encode(text).ids == ref_ids(ref, text)
        assert enc.offsets == tok.encode(text).offsets
    assert fallback.eos_id == tok.eos_id and fallback.vocab_size == tok.vocab_size


def test_readable_piece():
    from tokenizers import pre_tokenizers

    assert sorted(BYTE_TO_CHAR.values()) == sorted(pre_tokenizers.ByteLevel.alphabet())
    assert readable_piece("Ġthe") == "␣the" and readable_piece("Ċ") == "↵" and readable_piece("ĉ") == "⇥"
    assert readable_piece("MÃ¼ller") == "Müller" and readable_piece("Ã") == "<0xC3>"
    assert readable_piece("ðŁĻĤ") == "🙂" and readable_piece("ðŁ") == "<0xF0><0x9F>"
    assert readable_piece("ć") == "<0x07>" and readable_piece("<|endoftext|>") == "<|endoftext|>"
    assert readable_piece("▁Straße") == "▁Straße"  # not byte-level: unchanged
    assert byte_level_text("ĠMÃ¼ller") == " Müller" and byte_level_text("Ã") == "\ufffd"


def test_readable_pieces_spell_the_text(gpt2):
    tok, _, _, _ = gpt2
    text = "Herr Müller trinkt\tim Café.\nDanke!"
    pieces = [readable_piece(p) for p in tok.encode(text).tokens]
    assert "".join(pieces) == text.replace(" ", "␣").replace("\t", "⇥").replace("\n", "↵")


# --- both --------------------------------------------------------------------------------------------------------
def test_to_str_is_stable_and_tells_tokenizers_apart(marian, gpt2, tmp_path):
    m, _, _, folder = marian
    again = MarianTextTokenizer.from_folder(folder)
    assert m.to_str() == again.to_str() and json.loads(m.to_str())["kind"] == "unigram"
    other = tmp_path / "other"
    shutil.copytree(folder, other)
    vocab = json.loads((other / "vocab.json").read_text(encoding="utf-8"))
    vocab["extra"] = len(vocab)
    (other / "vocab.json").write_text(json.dumps(vocab), encoding="utf-8")
    assert MarianTextTokenizer.from_folder(other).to_str() != m.to_str()
    g = gpt2[0]
    assert g.to_str() == GPT2TextTokenizer.from_folder(gpt2[3]).to_str() != m.to_str()
    assert json.loads(g.to_str())["model"]["type"] == "BPE"


def test_lone_surrogates_read_as_replacement_character(marian, gpt2):
    for tok in (marian[0], gpt2[0]):
        assert tok.encode("a\ud800b") == tok.encode("a\ufffdb")


def test_unknown_share_uses_the_tokenizers_unknown_id(marian, gpt2):
    m, g = marian[0], gpt2[0]
    assert unknown_share(m, "Die Katze") == 0.0 and unknown_share(m, "🙂🙂") == 1.0
    assert unknown_share(m, "Katze 🙂") == pytest.approx(1 / 6)
    assert unknown_share(g, "🙂 日本語 مرحبا") == 0.0  # byte-level: nothing is unknown


def test_prepare_source_with_hf_tokenizers(marian, gpt2):
    for tok in (marian[0], gpt2[0]):
        src = prepare_source(tok, "Die Katze 🙂", max_len=64, eos_id=tok.eos_id, unk_id=tok.unk_id)
        assert src.ids[-1] == tok.eos_id and src.tokens[-1] == tok.id_to_token(tok.eos_id)
        assert src.ids[:-1] == tok.encode("Die Katze 🙂").ids
        assert any("<unk>" in n for n in src.notes) == (tok.kind == "unigram")


@pytest.mark.parametrize(
    "model_type,files,broken,match",
    [
        ("marian", ["target.spm", "vocab.json"], None, "source.spm is missing"),
        ("marian", ["source.spm", "vocab.json"], None, "target.spm is missing"),
        ("marian", ["source.spm", "target.spm"], None, "vocab.json is missing"),
        (
            "marian",
            ["source.spm", "target.spm", "vocab.json"],
            ("source.spm", b"not a model"),
            "source.spm is not a valid",
        ),
        (
            "marian",
            ["source.spm", "target.spm", "vocab.json"],
            ("vocab.json", b"{oops"),
            "vocab.json .* not valid JSON",
        ),
        (
            "marian",
            ["source.spm", "target.spm", "vocab.json"],
            ("vocab.json", b'{"a": 0}'),
            "vocab.json has no '<unk>'",
        ),
        ("marian", ["source.spm", "target.spm", "vocab.json"], ("vocab.json", b'["a"]'), "vocab.json must map"),
        (
            "marian",
            ["source.spm", "target.spm", "vocab.json"],
            ("tokenizer_config.json", b"{"),
            "tokenizer_config.json",
        ),
        (
            "marian",
            ["source.spm", "target.spm", "vocab.json"],
            ("tokenizer_config.json", b'{"separate_vocabs": true}'),
            "separate",
        ),
        ("gpt2", [], None, "neither tokenizer.json nor vocab.json"),
        ("gpt2", ["vocab.json"], None, "merges.txt"),
        ("gpt2", ["vocab.json", "merges.txt"], ("merges.txt", b"#version: 0.2\nq z\n"), "vocab.json / merges.txt"),
        ("gpt2", ["tokenizer.json"], ("tokenizer.json", b"{not json"), "tokenizer.json in .* is not a valid"),
        ("bert", [], None, "model_type 'bert' is not supported"),
    ],
)
def test_missing_or_broken_files_raise_value_error_naming_the_file(
    marian, gpt2, tmp_path, model_type, files, broken, match
):
    source = (marian if model_type == "marian" else gpt2)[3]
    for name in files:
        shutil.copy(source / name, tmp_path / name)
    if broken:
        (tmp_path / broken[0]).write_bytes(broken[1])
    with pytest.raises(ValueError, match=match):
        load_hf_tokenizer(tmp_path, model_type)
