"""Ding dictionary parsing and the leak-free split, the shipped data files, TSV reading and the BPE tokenizer (the
preparation of user input: ``tests/test_prepare_source.py``)."""

from __future__ import annotations

import gzip

import pytest
from tokenizers import Tokenizer, models

from corpora.ding import clean_text, extract_pairs, is_clean, is_sentence, parse_ding_line, split_dataset, split_of
from corpora.files import DataError, Pair, dataset_path, read_tsv, split_key, write_tsv_gz
from model.tokenizer import SPECIAL_TOKENS, TextTokenizer

DING_LINES = """# Version :: devel 2023-01-30
Haus {n}; Gebäude {n} | Häuser {pl}; Gebäude {pl} :: house; building | houses; buildings
Das ist mir egal. [ugs.] :: I don't care. [coll.]
etw. tun :: to do sth.
jdm. helfen; jdm. beistehen :: to help sb.; to assist sb.
guten Morgen :: good morning
Guten Morgen! :: good morning
Apfel {m} (Frucht) :: apple (fruit)
Auto {n}; Wagen {m}; Kraftfahrzeug {n} :: car; automobile
Mismatch | fields :: only one
Er ist nach Hause gegangen. :: He went home.
ein Haus bauen :: to build a house
Warte mal ... :: Wait a minute ...
das ist gut. :: that is good.
Das ist gut [ugs.] . :: That is good.
Ich wusste es nicht. :: I didn’t know.
ein Stück Kuchen {n} :: a piece of cake
guten Morgen :: good morning
Wie geht's? | Wie geht es Ihnen? :: How are you? | How do you do?
""".splitlines(keepends=True)


# --- Ding parsing -----------------------------------------------------------------------------------------------
def test_parse_ding_line_aligns_fields_english_first():
    line = "Haus {n}; Gebäude {n} | Häuser {pl}; Gebäude {pl} :: house; building | houses; buildings\n"
    assert parse_ding_line(line) == [
        ("house; building", "Haus {n}; Gebäude {n}"),
        ("houses; buildings", "Häuser {pl}; Gebäude {pl}"),
    ]
    assert parse_ding_line("# Version :: devel 2023-01-30") == []  # comment
    assert parse_ding_line("no separator here") == []
    assert parse_ding_line("Mismatch | fields :: only one") == []  # fields must align one-to-one


def test_clean_text_removes_labels_and_normalises():
    assert clean_text("Apfel {m} (Frucht)") == "Apfel"
    assert clean_text("Das ist gut [ugs.] .") == "Das ist gut."
    assert clean_text("I didn’t  know.") == "I didn't know."
    assert clean_text("Gebäude") == clean_text("Geba\u0308ude")  # NFC: decomposed umlaut is composed
    assert clean_text("<Abk.> Haus") == "Haus"


@pytest.mark.parametrize(
    "text",
    [
        "to do sth.",
        "jdm. helfen",
        "etw. tun",
        "Wait a minute ...",
        "and/or",
        "to help sb.",
        "a (b",
        "a; b",
        "x\x07y",
        "",
    ],
)
def test_is_clean_rejects_placeholders_and_markup(text):
    assert not is_clean(text)


@pytest.mark.parametrize("text", ["good morning", "I don't care.", "Das Haus ist groß."])
def test_is_clean_accepts_plain_text(text):
    assert is_clean(text)


def test_is_sentence():
    assert is_sentence("He went home.")
    assert is_sentence("How do you do?")
    assert is_sentence("3 dogs bark!")
    assert not is_sentence("that is good.")  # lower-case start
    assert not is_sentence("Wie geht's?")  # two words
    assert not is_sentence("He went home")  # no final punctuation
    assert not is_sentence("Word " * 26 + "end.")  # too long


def test_extract_pairs_classifies_sentences_phrases_words():
    out = extract_pairs(DING_LINES)
    assert out["sentences"] == [
        Pair("I don't care.", "Das ist mir egal."),
        Pair("He went home.", "Er ist nach Hause gegangen."),
        Pair("That is good.", "Das ist gut."),
        Pair("I didn't know.", "Ich wusste es nicht."),
        Pair("How do you do?", "Wie geht es Ihnen?"),
    ]
    assert out["phrases"] == [
        Pair("good morning", "guten Morgen"),  # once, although the line appears twice
        Pair("to build a house", "ein Haus bauen"),
        Pair("a piece of cake", "ein Stück Kuchen"),
    ]
    assert out["words"] == [
        Pair("house", "Haus"),
        Pair("building", "Gebäude"),
        Pair("houses", "Häuser"),
        Pair("buildings", "Gebäude"),
        Pair("apple", "Apfel"),
        Pair("car", "Auto"),  # 2 vs 3 alternatives: first with first only
    ]
    everything = [p for kind in out.values() for p in kind]
    for p in everything:  # no placeholder, no label survived
        assert is_clean(p.src) and is_clean(p.tgt), p
        assert "sth" not in p.src and "etw" not in p.tgt
    # "Guten Morgen!" :: "good morning" is half a sentence: neither phrase nor word.
    assert Pair("good morning", "Guten Morgen!") not in everything


def _find(split: str, template: str, start: int = 0) -> str:
    for i in range(start, start + 5000):
        s = template.format(i)
        if split_of(s) == split:
            return s
    raise AssertionError(f"no {split} sentence found")


def test_split_dataset_keeps_held_out_sentences_out_of_training():
    valid_en = _find("valid", "The number {} is odd.")
    test_en = _find("test", "The number {} is odd.")
    train_en = _find("train", "The number {} is odd.")
    valid_de = "Die Zahl ist seltsam."
    extracted = {
        "sentences": [
            Pair(valid_en, valid_de),
            Pair(valid_en.upper(), "Eine zweite Referenz."),  # same English key: dropped (one reference each)
            Pair(test_en, "Die Testzahl ist ungerade."),
            Pair(train_en, "Die Zahl ist gerade."),
            Pair(train_en, "Noch eine Übersetzung."),  # training may keep several translations
        ],
        "phrases": [
            Pair(valid_en.rstrip(".").lower(), "irgendwas"),  # English side = a valid sentence
            Pair("a strange number", "die zahl ist seltsam"),  # German side = a valid sentence's German
            Pair("an odd number", "eine ungerade Zahl"),  # unrelated: kept
        ],
        "words": [Pair("number", "Zahl"), Pair(test_en, "x")],
    }
    splits = split_dataset(extracted)
    assert splits["valid"] == [Pair(valid_en, valid_de)]
    assert splits["test"] == [Pair(test_en, "Die Testzahl ist ungerade.")]
    assert splits["train"] == [Pair(train_en, "Die Zahl ist gerade."), Pair(train_en, "Noch eine Übersetzung.")]
    assert splits["phrases"] == [Pair("an odd number", "eine ungerade Zahl")]
    assert splits["words"] == [Pair("number", "Zahl")]


def test_split_key_and_split_of_are_deterministic():
    assert split_key("  Hello, World!  It's me. ") == "hello world it s me"
    assert split_key("Größe?") == "größe"
    for s in ("He went home.", "I don't care.", "The number 30 is odd.", "The number 33 is odd."):
        assert split_of(s) == split_of(s) == split_of(s.upper().rstrip(".") + " !")
    # Fixed answers (an MD5 bucket, independent of PYTHONHASHSEED): the split must never move.
    assert split_of("The number 30 is odd.") == "valid"
    assert split_of("The number 33 is odd.") == "test"
    assert split_of("The number 31 is odd.") == "train"


def test_split_of_proportions():
    names = [split_of(f"sentence {i} about things") for i in range(20000)]
    for split in ("valid", "test"):
        assert 0.05 < names.count(split) / len(names) < 0.077


def test_write_and_read_tsv_gz(tmp_path):
    pairs = [Pair("Hello.", "Hallo."), Pair("Größe", "size")]
    path = tmp_path / "x.tsv.gz"
    write_tsv_gz(path, pairs)
    assert read_tsv(path) == pairs
    first = path.read_bytes()
    write_tsv_gz(path, pairs)
    assert path.read_bytes() == first  # reproducible bytes (fixed gzip mtime)
    assert read_tsv(path, limit=1) == pairs[:1]


def test_read_tsv_skips_malformed_lines(tmp_path):
    path = tmp_path / "x.tsv"
    path.write_text("a\tb\n\nno tab here\n\tempty source\nc\td\textra\n", encoding="utf-8")
    assert read_tsv(path) == [Pair("a", "b"), Pair("c", "d")]


def test_read_tsv_errors(tmp_path):
    with pytest.raises(DataError, match="No such data file"):
        read_tsv(tmp_path / "missing.tsv")
    plain = tmp_path / "notabs.tsv"
    plain.write_text("just text\nmore text\n", encoding="utf-8")
    with pytest.raises(DataError, match="holds no 'source<TAB>target' lines"):
        read_tsv(plain)
    gz = tmp_path / "notabs.tsv.gz"
    with gzip.open(gz, "wt", encoding="utf-8") as f:
        f.write("one\ntwo\n")
    with pytest.raises(DataError, match="holds no"):
        read_tsv(gz)
    empty = tmp_path / "empty.tsv"
    empty.write_text("")
    with pytest.raises(DataError):
        read_tsv(empty)
    not_gzip = tmp_path / "fake.tsv.gz"
    not_gzip.write_bytes(b"a\tb\n")
    with pytest.raises(DataError, match="Cannot read"):
        read_tsv(not_gzip)


# --- the shipped data ---------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def shipped():
    return {name: read_tsv(dataset_path(name)) for name in ("train", "valid", "test", "phrases", "words")}


def test_shipped_sizes(shipped):
    assert 800 <= len(shipped["valid"]) <= 1300
    assert 800 <= len(shipped["test"]) <= 1300
    assert len(shipped["train"]) >= 13000
    assert len(shipped["phrases"]) > 0 and len(shipped["words"]) > 0


def test_shipped_files_have_no_held_out_sentence_in_training(shipped):
    valid_keys = {split_key(p.src) for p in shipped["valid"]}
    test_keys = {split_key(p.src) for p in shipped["test"]}
    assert not valid_keys & test_keys
    held_out = valid_keys | test_keys
    for name in ("train", "phrases", "words"):
        leaked = held_out & {split_key(p.src) for p in shipped[name]}
        assert not leaked, f"{name} holds held-out sentences, e.g. {sorted(leaked)[:3]}"
    # The training extras are also free of the held-out German sides.
    held_out_de = {split_key(p.tgt) for name in ("valid", "test") for p in shipped[name]}
    for name in ("phrases", "words"):
        assert not held_out_de & {split_key(p.tgt) for p in shipped[name]}


def test_shipped_splits_agree_with_split_of(shipped):
    for name in ("train", "valid", "test"):
        wrong = [p.src for p in shipped[name] if split_of(p.src) != name]
        assert not wrong, f"{name}: {wrong[:3]}"


# --- tokenizer ----------------------------------------------------------------------------------------------------
TEXTS = [
    "The house is big.",
    "Yes, please.",
    "Die Straße ist schön.",
    "Öffne das Fenster!",
    "Müller läuft schnell über die Brücke.",
    "Where is the station?",
]


def test_special_ids(tokenizer):
    for i, name in enumerate(SPECIAL_TOKENS):
        assert tokenizer.token_to_id(name) == i
    assert SPECIAL_TOKENS == ["<pad>", "<bos>", "<eos>", "<unk>"]
    assert tokenizer.id_to_token(3) == "<unk>"
    assert tokenizer.id_to_token(10**6) == "<unk>"  # out of range: shown as <unk>, no crash
    assert 50 < tokenizer.vocab_size <= 400


@pytest.mark.parametrize("text", TEXTS)
def test_offsets_slice_the_text_to_the_piece(tokenizer, text):
    enc = tokenizer.encode(text)
    assert len(enc.ids) == len(enc.tokens) == len(enc.offsets) > 1
    assert 3 not in enc.ids  # every character was seen in training
    prev_end = 0
    for piece, (start, end) in zip(enc.tokens, enc.offsets, strict=True):
        assert prev_end <= start <= end <= len(text)  # in order, never overlapping
        assert start < end or piece == "▁"  # only a bare word-start marker may have an empty span
        assert text[start:end].strip() == piece.replace("▁", "")
        prev_end = end
    assert enc.offsets[-1][1] == len(text)
    assert tokenizer.tokens(enc.ids) == enc.tokens


def test_bare_leading_marker_does_not_claim_the_first_character(tokenizer):
    """ "Ö" never starts a word in the training text, so "Öffne" begins with a bare "▁" piece."""
    enc = tokenizer.encode("Öffne")
    assert enc.tokens[:2] == ["▁", "Ö"]
    assert enc.offsets[:2] == [(0, 0), (0, 1)]


@pytest.mark.parametrize("text", TEXTS + ["Hello world, this is a test."])
def test_decode_inverts_encode(tokenizer, text):
    ids = tokenizer.encode(text).ids
    assert tokenizer.decode(ids) == text
    assert tokenizer.decode([1] + ids + [2, 0, 0]) == text  # special tokens are skipped


def test_nfc_normalisation(tokenizer):
    composed, decomposed = "schön", "scho\u0308n"
    assert tokenizer.encode(decomposed).ids == tokenizer.encode(composed).ids


def test_emoji_is_unknown(tokenizer):
    text = "Hallo 😀 Welt"
    enc = tokenizer.encode(text)
    assert 3 in enc.ids
    s, e = enc.offsets[enc.ids.index(3)]
    assert text[s:e] == "😀"


def test_encode_batch_matches_encode(tokenizer):
    assert tokenizer.encode_batch(TEXTS) == [tokenizer.encode(t).ids for t in TEXTS]


def test_save_and_from_file_round_trip(tokenizer, tmp_path):
    path = tmp_path / "tokenizer.json"
    tokenizer.save(path)
    back = TextTokenizer.from_file(path)
    assert back.vocab_size == tokenizer.vocab_size
    for t in TEXTS + ["Hallo 😀"]:
        assert back.encode(t) == tokenizer.encode(t)
    assert back.to_str() == tokenizer.to_str()


@pytest.mark.parametrize("content", [b"garbage", b"{}", b"\x00\xff\xfe", b""])
def test_from_file_garbage_raises_value_error(tmp_path, content):
    path = tmp_path / "tokenizer.json"
    path.write_bytes(content)
    with pytest.raises(ValueError, match="not a valid tokenizer"):
        TextTokenizer.from_file(path)
    with pytest.raises(ValueError):
        TextTokenizer.from_file(tmp_path / "missing.json")


def test_tokenizer_without_special_ids_is_refused():
    bare = Tokenizer(
        models.BPE(vocab={"a": 0, "<pad>": 1, "<bos>": 2, "<eos>": 3, "<unk>": 4}, merges=[], unk_token="<unk>")
    )
    with pytest.raises(ValueError, match="<pad>"):
        TextTokenizer(bare)
