"""Shared EN/DE BPE tokenizer, built on Hugging Face ``tokenizers`` (Sennrich et al. 2016, BPE).

One vocabulary serves source and target, as in the paper. Text is NFC-normalised, split on whitespace
with a ``▁`` word-start marker (Metaspace), and merged by BPE; characters never seen in training (emoji,
most non-Latin scripts) become ``<unk>``. Every encoding keeps per-token character offsets into the
original text, for the BPE view.

Text is read literally: a user who types ``<eos>`` or ``<pad>`` gets the characters ``<`` ``e`` ``o`` ``s`` ``>``,
never the special id (those ids are only ever added by code). :func:`unknown_share` says how much of a text the
model cannot read.
"""

from __future__ import annotations

import re
import unicodedata
from pathlib import Path
from typing import Iterable

from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

from model import tokenizing
from model.tokenizing import Encoding

SPECIAL_TOKENS = ["<pad>", "<bos>", "<eos>", "<unk>"]
PAD_ID, BOS_ID, EOS_ID, UNK_ID = 0, 1, 2, 3
#: :func:`unknown_share` above this: the model cannot read most of the text (a page can say so).
MOSTLY_UNKNOWN = 0.5

_SURROGATE = re.compile("[\ud800-\udfff]")


def replace_surrogates(text: str) -> str:
    """``text`` with every lone surrogate replaced by U+FFFD, one character for one (offsets still fit).

    A Python ``str`` can hold a lone surrogate (``json.loads('"\\ud800"')``, or a command-line argument with a
    byte that is not UTF-8, which Python decodes as ``\\udcXX``); UTF-8, the Rust tokenizer (``TypeError``) and
    Streamlit cannot.
    """
    return _SURROGATE.sub("\ufffd", text) if not text.isascii() else text


class TextTokenizer:
    """A thin wrapper over a ``tokenizers.Tokenizer`` that knows the special ids; a
    :class:`~model.tokenizing.Tokenizer`.

    Args:
        tokenizer: a BPE tokenizer whose first four ids are ``<pad> <bos> <eos> <unk>``.
    """

    #: What cuts the text (the Tokenization page dispatches on it): ``"bpe"`` here; ``"byte-bpe"`` (GPT-2) and
    #: ``"unigram"`` (Marian) in :mod:`model.hf.tokenizers`.
    kind = "bpe"
    pad_id, bos_id, eos_id, unk_id = PAD_ID, BOS_ID, EOS_ID, UNK_ID
    source_model = None  # BPE: no unigram model
    #: How a word start is shown (:meth:`display`): Metaspace's ``▁``, the space before the word, as stored.
    word_start = "▁"

    @staticmethod
    def display(piece: str) -> str:
        """A piece as every page shows it: as stored (``"▁Bobby"``). GPT-2's tokenizer shows its pieces otherwise
        (:meth:`model.hf.tokenizers.GPT2TextTokenizer.display`)."""
        return piece

    @staticmethod
    def from_display(text: str) -> str:
        """The stored piece of a shown one (:meth:`display` undone): the same string."""
        return text

    def __init__(self, tokenizer: Tokenizer):
        self._tok = tokenizer
        for i, name in enumerate(SPECIAL_TOKENS):
            if tokenizer.token_to_id(name) != i:
                raise ValueError(f"tokenizer must map {name!r} to id {i}")
        # Typed "<pad>" must not become the padding id: a decoder-only prompt with it was masked as padding when
        # the whole prefix was fed at once but not in later cached steps (cache on/off logits 10 nats apart), and
        # a typed "<eos>" ended the source in mid-sentence. Not stored in tokenizer.json; training text has none.
        tokenizer.encode_special_tokens = True

    # --- construction -------------------------------------------------------------------------
    @classmethod
    def train(cls, texts: Iterable[str], vocab_size: int = 8000, min_frequency: int = 2) -> "TextTokenizer":
        """Train a BPE vocabulary of at most ``vocab_size`` pieces (specials included) on ``texts``."""
        tok = Tokenizer(models.BPE(unk_token="<unk>"))
        tok.normalizer = normalizers.NFC()
        tok.pre_tokenizer = pre_tokenizers.Metaspace()
        tok.decoder = decoders.Metaspace()
        trainer = trainers.BpeTrainer(
            vocab_size=vocab_size, min_frequency=min_frequency, special_tokens=SPECIAL_TOKENS, show_progress=False
        )
        tok.train_from_iterator(texts, trainer=trainer)
        return cls(tok)

    @classmethod
    def from_file(cls, path: str | Path) -> "TextTokenizer":
        """Load ``tokenizer.json``. Raises ``ValueError`` when the file is not a valid tokenizer."""
        try:
            tok = Tokenizer.from_file(str(path))
        except Exception as exc:  # tokenizers raises a bare Exception on malformed JSON
            raise ValueError(f"{path} is not a valid tokenizer file: {exc}") from exc
        return cls(tok)

    def save(self, path: str | Path) -> None:
        self._tok.save(str(path))

    def to_str(self) -> str:
        """The tokenizer as a JSON string (what ``tokenizer.json`` holds)."""
        return self._tok.to_str()

    # --- use ----------------------------------------------------------------------------------
    @property
    def vocab_size(self) -> int:
        return self._tok.get_vocab_size()

    @property
    def backend(self) -> Tokenizer:
        """The underlying ``tokenizers.Tokenizer`` (for merge replay and vocabulary statistics)."""
        return self._tok

    def encode(self, text: str) -> Encoding:
        """Encode ``text`` without special tokens; offsets index into ``text``. Special-token spellings in the text
        are plain characters; a lone surrogate is read as U+FFFD (``<unk>``)."""
        enc = self._tok.encode(replace_surrogates(text), add_special_tokens=False)
        offsets = [(start, end) for start, end in enc.offsets]
        # The "▁" that Metaspace prepends to the text has no character of its own; when it stays a piece by
        # itself (e.g. before "Ö…"), ``tokenizers`` aligns it with the first character, which then appears in two
        # pieces. Give such a bare marker an empty span instead.
        for i, (piece, (start, end)) in enumerate(zip(enc.tokens, offsets, strict=True)):
            if piece == "▁" and not text[start:end].isspace():
                offsets[i] = (start, start)
        return Encoding(list(enc.ids), list(enc.tokens), offsets)

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        return [
            list(e.ids)
            for e in self._tok.encode_batch([replace_surrogates(t) for t in texts], add_special_tokens=False)
        ]

    def decode(self, ids: Iterable[int]) -> str:
        """Text of ``ids``; special tokens are skipped."""
        return self._tok.decode([int(i) for i in ids], skip_special_tokens=True)

    def id_to_token(self, token_id: int) -> str:
        """The piece of ``token_id``; ``"<unk>"`` for an id outside the vocabulary (negative included)."""
        token_id = int(token_id)
        return (self._tok.id_to_token(token_id) if 0 <= token_id < 2**32 else None) or "<unk>"

    def token_to_id(self, token: str) -> int | None:
        """The id of a vocabulary piece, ``None`` for any other string. A lone surrogate is read as U+FFFD
        (:func:`replace_surrogates`): the id of the ``�`` piece where the vocabulary has one (the 16k vocabulary
        learned with news does), else ``None``."""
        return self._tok.token_to_id(replace_surrogates(token))

    def tokens(self, ids: Iterable[int]) -> list[str]:
        return [self.id_to_token(i) for i in ids]


def unknown_share(tokenizer: tokenizing.Tokenizer, text: str) -> float:
    """Share of the text's characters, whitespace not counted, that the model reads as ``<unk>`` (0.0 to 1.0).

    Emoji, Chinese, Arabic or Hebrew never occurred in the training data: a text of them is all ``<unk>`` (1.0), and
    above :data:`MOSTLY_UNKNOWN` the model cannot read most of it. Counted on the NFC form of the text, as the
    tokenizer sees it (pass :attr:`~decoding.stepping.SourceInput.text` to leave out removed control characters).
    0.0 for a text without a non-space character, and for a tokenizer without an unknown token (``unk_id`` is
    ``None``: GPT-2's byte-level BPE reads every byte).
    """
    unk_id = tokenizer.unk_id
    if unk_id is None:
        return 0.0
    text = unicodedata.normalize("NFC", replace_surrogates(text or ""))
    enc = tokenizer.encode(text)
    unknown = {
        i
        for tid, (s, e) in zip(enc.ids, enc.offsets, strict=True)
        if tid == unk_id
        for i in range(s, e)
        if not text[i].isspace()
    }
    total = sum(1 for ch in text if not ch.isspace())
    return len(unknown) / total if total else 0.0
