"""The ``hypothesis`` settings and text strategies of the property-based tests (``test_property_inputs.py``,
``test_property_pages.py``), and the checks they share: what any text a visitor can type may be, and what "a clear
typed error" means."""

from __future__ import annotations

import json
import string
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.configuration import set_hypothesis_home_dir

from decoding.stepping import MAX_INPUT_CHARS, InputError, clean_user_text, input_limit, prepare_source
from model.checkpoint import Checkpoint

ROOT = Path(__file__).resolve().parent.parent

# Hypothesis keeps caches (constants found in the code, Unicode tables) under .hypothesis/ even without an example
# database; keep them out of the repository.
set_hypothesis_home_dir(Path(tempfile.gettempdir()) / "attention-explorer-hypothesis")

settings.register_profile(
    "attention-explorer",
    database=None,  # no .hypothesis example database in the repository
    deadline=None,  # one shared CPU core: timings vary, correctness does not
    derandomize=True,  # the same examples on every run (CI is deterministic)
    print_blob=False,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture, HealthCheck.data_too_large],
)
PROFILE = settings.get_profile("attention-explorer")


def examples(n: int) -> settings:
    """The project profile with ``n`` examples."""
    return settings(PROFILE, max_examples=n)


# --- strategies ----------------------------------------------------------------------------------------------
def string_of(parts: st.SearchStrategy[str], min_size: int = 0, max_size: int = 20) -> st.SearchStrategy[str]:
    """Strings of ``parts`` (single characters, or sequences such as a ZWJ emoji, which ``st.text`` refuses)."""
    return st.lists(parts, min_size=min_size, max_size=max_size).map("".join)


def chars(*ranges: tuple[int, int]) -> st.SearchStrategy[str]:
    return st.one_of([st.integers(a, b).map(chr) for a, b in ranges])


WHITESPACE = " \t\n\r\x0b\x0c\x1c\x1d\x1e\x1f\x85\xa0\u1680\u2000\u2003\u2007\u200a\u2028\u2029\u202f\u205f\u3000"
#: Our special tokens as a user might type them (and near misses).
SPECIAL_SPELLINGS = [
    "<pad>",
    "<bos>",
    "<eos>",
    "<unk>",
    "<PAD>",
    "< eos >",
    "<<eos>>",
    "<eos",
    "eos>",
    "</s>",
    "<s>",
    "<mask>",
    "▁",
    "▁<eos>",
]
LATIN = string_of(st.sampled_from(string.ascii_letters + "äöüßÄÖÜéè'"), min_size=1, max_size=12)
WORDS = st.lists(LATIN, min_size=1, max_size=8).map(" ".join)
#: Words both shipped vocabularies read without <unk> (brown-lm has no umlauts).
ASCII_WORDS = st.lists(
    string_of(st.sampled_from(string.ascii_letters), min_size=1, max_size=12), min_size=1, max_size=8
).map(" ".join)
#: Every character of a piece of the shipped translator's vocabulary: its 16k BPE, learned with web text, holds a
#: few Cyrillic, Arabic and CJK letters and emoji, which the "unreadable" strategies below leave out.
KNOWN_CHARS = frozenset(
    "".join(
        json.loads((ROOT / "checkpoints" / "en-de" / "tokenizer.json").read_text(encoding="utf-8"))["model"]["vocab"]
    )
)


def unknown_only(parts: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    """``parts`` without those that hold a character of :data:`KNOWN_CHARS`."""
    return parts.filter(lambda part: KNOWN_CHARS.isdisjoint(part))


#: Emoji: code points, and sequences (ZWJ families, flags, skin tones, variation selectors) that are one picture.
EMOJI_ALL_UNK = unknown_only(
    st.one_of(
        chars((0x1F300, 0x1F5FF), (0x1F600, 0x1F64F), (0x1F680, 0x1F6FF), (0x1F900, 0x1F9FF), (0x2600, 0x26FF)),
        st.sampled_from(["👩‍👩‍👧", "🇩🇪", "👍🏽", "❤️", "🏳️‍🌈"]),
    )
)
EMOJI = st.one_of(EMOJI_ALL_UNK, st.just("1️⃣"))  # a keycap: the digit is readable, the rest is not
ARABIC = unknown_only(chars((0x0621, 0x064A), (0x0660, 0x0669)))
HEBREW = chars((0x05D0, 0x05EA))
BIDI = st.sampled_from("\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\u061c")
#: Scripts absent from both shipped vocabularies: every character is ``<unk>``.
UNREADABLE = st.one_of(
    EMOJI_ALL_UNK,
    ARABIC,
    HEBREW,
    unknown_only(chars((0x4E00, 0x9FFF), (0x0410, 0x044F), (0x0905, 0x0939), (0x3041, 0x3096), (0xAC00, 0xD7A3))),
)
COMBINING = st.characters(categories=["Mn", "Mc", "Me"])
CONTROL = st.characters(categories=["Cc", "Cf"])  # NUL, ESC, DEL, …; zero-width joiners, BOM, bidi overrides
PUNCTUATION = st.characters(categories=["Pc", "Pd", "Ps", "Pe", "Pi", "Pf", "Po", "Sm", "Sc", "Sk"])
SURROGATE = st.characters(categories=["Cs"])


def joined(parts: st.SearchStrategy[str], max_size: int = 8) -> st.SearchStrategy[str]:
    """Fragments joined by a space, nothing or another whitespace character."""
    return st.builds(
        lambda items, sep: sep.join(items),
        st.lists(parts, min_size=1, max_size=max_size),
        st.sampled_from([" ", "", "  ", "\t", "\n", "\u3000"]),
    )


FRAGMENT = st.one_of(
    WORDS,
    string_of(EMOJI, min_size=1, max_size=6),
    string_of(st.one_of(ARABIC, HEBREW, BIDI), min_size=1, max_size=10),
    st.builds(lambda base, marks: base + marks, LATIN, string_of(COMBINING, min_size=1, max_size=6)),
    string_of(st.one_of(CONTROL, st.sampled_from("ab .")), min_size=1, max_size=10),
    string_of(PUNCTUATION, min_size=1, max_size=10),
    st.sampled_from(SPECIAL_SPELLINGS),
    st.text(max_size=20),
)


def repeated(unit: str, n: int) -> str:
    """``unit`` repeated to exactly ``n`` characters (``"x"`` for an empty unit)."""
    unit = unit or "x"
    return (unit * (n // len(unit) + 1))[:n]


#: Classes of text a visitor can type, at most a few hundred characters each (no lone surrogates: they cannot
#: arrive through a browser or a URL).
SHORT_CLASSES = [
    st.just(""),
    string_of(st.sampled_from(WHITESPACE), min_size=1, max_size=40),  # whitespace only
    string_of(EMOJI, min_size=1, max_size=30),  # emoji only
    joined(string_of(st.one_of(ARABIC, HEBREW), min_size=1, max_size=8)),  # right-to-left
    joined(string_of(st.one_of(ARABIC, HEBREW, BIDI, LATIN), min_size=1, max_size=8)),  # bidi mixed with Latin
    string_of(COMBINING, min_size=1, max_size=20),  # combining marks with nothing to combine with
    joined(st.builds(lambda base, marks: base + marks, LATIN, string_of(COMBINING, min_size=1, max_size=8))),
    string_of(st.one_of(CONTROL, st.sampled_from("\x00\x1b\x7f"), LATIN), min_size=1, max_size=40),  # control chars
    joined(FRAGMENT),  # mixed scripts
    st.builds(repeated, LATIN, st.integers(30, 300)),  # a long word
    string_of(PUNCTUATION, min_size=1, max_size=40),  # punctuation only
    joined(string_of(UNREADABLE, min_size=1, max_size=8)),  # only <unk> characters
    joined(st.one_of(st.sampled_from(SPECIAL_SPELLINGS), WORDS)),  # special-token spellings
    joined(st.sampled_from(SPECIAL_SPELLINGS[:4])),  # nothing but special-token spellings
    st.text(max_size=100),  # anything hypothesis likes (all of Unicode but surrogates)
    WORDS,
]
SHORT_TEXT = st.one_of(SHORT_CLASSES)
#: Every class of a visitor's text, the long ones included (very long words; around the 2,000-character limit;
#: 10,000 and 12,000 characters).
USER_TEXT = st.one_of(
    *SHORT_CLASSES,
    st.builds(repeated, LATIN, st.integers(1000, 3000)),  # one very long word
    st.builds(repeated, FRAGMENT, st.sampled_from([MAX_INPUT_CHARS, MAX_INPUT_CHARS + 1, 10_000, 12_000])),
    st.builds(repeated, FRAGMENT, st.integers(1000, 2500)),
)
SPECIAL_TEXT = joined(st.one_of(st.sampled_from(SPECIAL_SPELLINGS[:4]), WORDS))
SURROGATE_TEXT = st.builds(
    lambda a, s, b: a + s + b,
    st.one_of(WORDS, st.just("")),
    string_of(SURROGATE, min_size=1, max_size=3),
    st.one_of(WORDS, st.just("")),
)


def mix(common: st.SearchStrategy[str], rare: st.SearchStrategy[str], every: int) -> st.SearchStrategy[str]:
    """``rare`` for one example in ``every``, else ``common`` (``st.one_of`` flattens, so a nested class would be
    drawn as one branch among ~20 and might never come up in a few dozen examples)."""
    return st.integers(0, every - 1).flatmap(lambda i: rare if i == 0 else common)


#: What a Python caller can pass: a visitor's text, or (one in five) one with lone surrogates in it.
ANY_STR = mix(USER_TEXT, SURROGATE_TEXT, 5)


def utf8(text: str) -> bytes:
    """``text`` as UTF-8 (fails on a lone surrogate: what Streamlit and a UTF-8 terminal would do)."""
    return text.encode("utf-8")


def prepared(ckpt: Checkpoint, text: str):
    cfg = ckpt.config
    return prepare_source(ckpt.tokenizer, text, input_limit(cfg), cfg.eos_id, cfg.unk_id)


def assert_input_error(exc: InputError, text: str) -> None:
    """An InputError is a ValueError with a message for the page, for one of the two documented reasons."""
    assert isinstance(exc, ValueError) and str(exc).strip()
    utf8(str(exc))
    assert len(text) > MAX_INPUT_CHARS or not clean_user_text(text)[0]


def source_or_none(ckpt: Checkpoint, text: str):
    """The prepared source, or ``None`` after checking that the InputError raised instead is a clear one."""
    try:
        return prepared(ckpt, text)
    except InputError as exc:
        assert_input_error(exc, text)
        return None
