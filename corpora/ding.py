"""EN–DE sentence pairs from the Ding dictionary, and reading of parallel TSV files.

The Ding dictionary (Debian package ``trans-de-en``, file ``/usr/share/trans/de-en``, GPL-2+,
Frank Richter, TU Chemnitz) has one entry a line::

    German | sub-entry | ... :: English | sub-entry | ...

The ``|``-separated fields are aligned one-to-one between the two sides; inside a field ``; ``
separates alternatives, and labels such as ``{m}``, ``[coll.]`` or ``(Frucht)`` are inline.

``python -m corpora prepare ding`` turns it into three kinds of clean pairs:

* **sentences** (3–25 words, capitalised, ending in ``.``, ``!`` or ``?``), split into
  train / valid / test by a hash of the normalised English side (about 1,000 valid and 1,000 test);
* **phrases** (2–8 words, no placeholders) and **words** (one word each side), training-only extras.

No valid or test sentence appears in any training file (phrases and words included). The output goes to
``assets/data/*.tsv.gz`` (``source<TAB>target``, English first) together with ``NOTICE.md``.
"""

from __future__ import annotations

import json
import re
import unicodedata
from pathlib import Path

from corpora.files import ASSETS_DATA, DataError, Pair, dataset_path, split_key, write_tsv_gz
from corpora.files import split_of as hash_split

DING_PATH = Path("/usr/share/trans/de-en")

#: Split buckets out of 1000 (hash of the normalised English sentence): ~6.3 % valid, ~6.3 % test.
VALID_BUCKETS = range(0, 63)
TEST_BUCKETS = range(63, 126)

# Placeholders of the dictionary ("etw.", "sb." ...) mark templates, not real text.
_PLACEHOLDER = re.compile(
    r"\b(etw|jdm|jdn|jds|jd|sth|sb|so|sbd|sthg|o\.\s?Ä|u\.\s?Ä|usw|etc)\b\.?|\.\.\.|…|~|/|\+|=|<|>|\"|#",
    re.IGNORECASE,
)
_LABELS = re.compile(r"\{[^}]*\}|\[[^\]]*\]|<[^>]*>")
_PAREN = re.compile(r"\([^)]*\)")
_SPACES = re.compile(r"\s+")
_SENTENCE_END = re.compile(r"[.!?]$")


def clean_text(text: str) -> str:
    """Normalise one dictionary alternative: NFC, labels ``{..}``/``[..]``/``(..)`` removed, spaces collapsed.

    Typographic apostrophes become ASCII ones so that "didn't" and "didn’t" are one word.
    """
    text = unicodedata.normalize("NFC", text)
    text = _LABELS.sub(" ", text)
    text = _PAREN.sub(" ", text)
    text = text.replace("’", "'").replace("‘", "'").replace("´", "'")
    text = _SPACES.sub(" ", text).strip()
    # Removing a label can leave a space before the final punctuation: "Das ist gut [ugs.] ."
    text = re.sub(r"\s+([.,!?;:])", r"\1", text)
    return text


def is_clean(text: str) -> bool:
    """True when the text has no dictionary placeholder, no unbalanced bracket and no control character."""
    if not text or _PLACEHOLDER.search(text):
        return False
    if any(ch in text for ch in "(){}[]|:;") or any(unicodedata.category(ch) == "Cc" for ch in text):
        return False
    return True


def is_sentence(text: str) -> bool:
    """A full sentence: 3–25 words, starts with an upper-case letter (or digit), ends in ``.``, ``!`` or ``?``."""
    n_words = len(text.split())
    return 3 <= n_words <= 25 and (text[0].isupper() or text[0].isdigit()) and bool(_SENTENCE_END.search(text))


def split_of(english: str) -> str:
    """``"train"``, ``"valid"`` or ``"test"`` of a Ding sentence pair, by the hash buckets of its English side."""
    return hash_split(english, VALID_BUCKETS, TEST_BUCKETS)


def _alternatives(field: str) -> list[str]:
    return [clean_text(alt) for alt in field.split("; ") if alt.strip()]


def parse_ding_line(line: str) -> list[tuple[str, str]]:
    """Aligned ``(english_field, german_field)`` tuples of one dictionary line (comments give ``[]``)."""
    if line.startswith("#") or " :: " not in line:
        return []
    german, english = line.rstrip("\n").split(" :: ", 1)
    de_fields, en_fields = german.split(" | "), english.split(" | ")
    if len(de_fields) != len(en_fields):
        return []
    return list(zip(en_fields, de_fields, strict=True))


def extract_pairs(lines) -> dict[str, list[Pair]]:
    """Classify every aligned field of the dictionary into ``sentences``, ``phrases`` and ``words``.

    Alternatives are paired position by position when both sides list the same number, else the first
    with the first. Duplicates are dropped; order follows the dictionary.
    """
    out: dict[str, list[Pair]] = {"sentences": [], "phrases": [], "words": []}
    seen: set[tuple[str, str]] = set()
    for line in lines:
        for en_field, de_field in parse_ding_line(line):
            en_alts, de_alts = _alternatives(en_field), _alternatives(de_field)
            if not en_alts or not de_alts:
                continue
            if len(en_alts) == len(de_alts):
                pairs = list(zip(en_alts, de_alts, strict=True))
            else:
                pairs = [(en_alts[0], de_alts[0])]
            for en, de in pairs:
                if not (is_clean(en) and is_clean(de)) or (en, de) in seen:
                    continue
                seen.add((en, de))
                n_en, n_de = len(en.split()), len(de.split())
                if is_sentence(en) and is_sentence(de):
                    out["sentences"].append(Pair(en, de))
                elif _SENTENCE_END.search(en) or _SENTENCE_END.search(de):
                    continue  # half a sentence pair, or a sentence fragment: neither phrase nor word
                elif n_en == 1 and n_de == 1:
                    out["words"].append(Pair(en, de))
                elif 2 <= n_en <= 8 and 1 <= n_de <= 8:
                    out["phrases"].append(Pair(en, de))
    return out


def split_dataset(extracted: dict[str, list[Pair]]) -> dict[str, list[Pair]]:
    """Files to write: ``train`` / ``valid`` / ``test`` sentences plus leak-free ``phrases`` and ``words``.

    Valid and test keep one reference per English sentence (the first). A phrase or word pair whose English
    or German side matches a valid/test sentence (ignoring case and punctuation) is dropped.
    """
    splits: dict[str, list[Pair]] = {"train": [], "valid": [], "test": []}
    held_out_keys: set[str] = set()
    for pair in extracted["sentences"]:
        name = split_of(pair.src)
        if name != "train":
            if split_key(pair.src) in held_out_keys:
                continue
            held_out_keys.add(split_key(pair.src))
            held_out_keys.add(split_key(pair.tgt))
        splits[name].append(pair)
    for extra in ("phrases", "words"):
        splits[extra] = [
            p
            for p in extracted[extra]
            if split_key(p.src) not in held_out_keys and split_key(p.tgt) not in held_out_keys
        ]
    return splits


NOTICE = """# Prepared EN–DE data (from the Ding dictionary)

Source: the Ding German–English dictionary, version {version}, by Frank Richter
<frank.richter@tu-chemnitz.de>, TU Chemnitz, https://dict.tu-chemnitz.de/ — as packaged by Debian
(`trans-de-en`, file `/usr/share/trans/de-en`).

Licence: GNU General Public License, version 2 or later (GPL-2+). These files are a derived work of
that dictionary and are distributed under the same licence.

Rebuild with `python -m corpora prepare ding` (needs `apt-get install trans-de-en`). Files, English first,
one `source<TAB>target` pair a line, gzip-compressed:

{table}
"""


def prepare(ding_path: Path = DING_PATH, out_dir: Path = ASSETS_DATA) -> dict[str, int]:
    """Parse the dictionary and write the split files plus ``NOTICE.md`` and ``stats.json``.

    Returns:
        The number of pairs in each file.

    Raises:
        DataError: the dictionary file is missing.
    """
    if not ding_path.is_file():
        raise DataError(f"{ding_path} not found: install it with 'apt-get install trans-de-en'")
    with open(ding_path, encoding="utf-8") as f:
        lines = f.readlines()
    version = next((line.split("::", 1)[1].strip() for line in lines[:5] if line.startswith("# Version")), "unknown")
    splits = split_dataset(extract_pairs(lines))
    counts = {}
    for name, pairs in splits.items():
        write_tsv_gz(dataset_path(name, out_dir), pairs)
        counts[name] = len(pairs)
    table = "\n".join(f"- `{name}.tsv.gz`: {n:,} pairs" for name, n in counts.items())
    (out_dir / "NOTICE.md").write_text(NOTICE.format(version=version, table=table), encoding="utf-8")
    (out_dir / "stats.json").write_text(json.dumps({"ding_version": version, **counts}, indent=2) + "\n")
    return counts
