"""What every tokenizer of the app offers: the :class:`Tokenizer` protocol and the :class:`Encoding` it returns.

Three classes implement it: ours, :class:`~model.tokenizer.TextTokenizer` (BPE with a ``▁`` word-start marker,
Sennrich et al. 2016), and for Hugging Face folders :class:`~model.hf.tokenizers.MarianTextTokenizer` (SentencePiece
unigram, Kudo 2018) and :class:`~model.hf.tokenizers.GPT2TextTokenizer` (byte-level BPE, Radford et al. 2019). The
pages and the model code use only these members, so that no code asks a tokenizer whether it has one: a feature
one kind lacks is a member that is ``None`` there (Marian has no ``backend`` to replay merges with, GPT-2 no
``unk_id``). ``tests/test_tokenizer_protocol.py`` checks each class against the protocol and exercises every member.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Protocol, runtime_checkable

#: What cuts the text: ``"bpe"`` (ours), ``"byte-bpe"`` (GPT-2), ``"unigram"`` (MarianMT).
KINDS = ("bpe", "byte-bpe", "unigram")


@dataclass(frozen=True)
class Encoding:
    """Token ids of one text with the pieces and their ``(start, end)`` character offsets (end exclusive)."""

    ids: list[int]
    tokens: list[str]
    offsets: list[tuple[int, int]]


@runtime_checkable
class Tokenizer(Protocol):
    """A tokenizer as the pages and the model code use it.

    Attributes:
        kind: what cuts the text (:data:`KINDS`); the Tokenization page shows a merge replay for ``"bpe"`` and
            ``"byte-bpe"``, the scored splits for ``"unigram"``.
        word_start: the mark a *shown* piece that starts a word begins with (``▁``; GPT-2's ``␣``).
        pad_id, bos_id, eos_id, unk_id: the special ids; ``None`` where the tokenizer has none (Marian has no
            ``<bos>``, GPT-2 no ``<pad>`` and no ``<unk>``). ``eos_id`` always exists.
    """

    # read-only to the protocol (properties), so that a class whose ids are always set (ours: ``bos_id: int``)
    # still implements it
    @property
    def kind(self) -> str: ...

    @property
    def word_start(self) -> str: ...

    @property
    def pad_id(self) -> int | None: ...

    @property
    def bos_id(self) -> int | None: ...

    @property
    def eos_id(self) -> int: ...

    @property
    def unk_id(self) -> int | None: ...

    @property
    def vocab_size(self) -> int:
        """Pieces in the vocabulary, specials included."""
        ...

    @property
    def backend(self) -> Any:
        """The ``tokenizers.Tokenizer`` behind a BPE (its normaliser, pre-tokenizer and merges, for the merge
        replay); ``None`` for a unigram tokenizer."""
        ...

    @property
    def source_model(self) -> Any:
        """The SentencePiece processor that cuts a unigram tokenizer's text (its pieces' scores, its n best
        splits); ``None`` for BPE."""
        ...

    def encode(self, text: str) -> Encoding:
        """``text`` as ids, pieces and character offsets into ``text``, without special tokens; typed spellings of
        special tokens stay plain text."""
        ...

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        """The ids of each text (as :meth:`encode`)."""
        ...

    def decode(self, ids: Iterable[int]) -> str:
        """The text of ``ids``; special tokens are skipped."""
        ...

    def tokens(self, ids: Iterable[int]) -> list[str]:
        """The stored piece of each id (:meth:`id_to_token`)."""
        ...

    def id_to_token(self, token_id: int) -> str:
        """The stored piece of ``token_id``; ``"<unk>"`` for an id outside the vocabulary."""
        ...

    def token_to_id(self, token: str) -> int | None:
        """The id of a stored piece; ``None`` for any other string."""
        ...

    def display(self, piece: str) -> str:
        """A stored piece as every page shows it (GPT-2's ``Ġthe`` → ``␣the``; others unchanged)."""
        ...

    def from_display(self, text: str) -> str:
        """:meth:`display` undone: the stored piece of a shown one (so that a typed piece can be looked up)."""
        ...

    def to_str(self) -> str:
        """A string that is equal for equal tokenizers and differs otherwise (a BPE's ``tokenizer.json``, a digest
        for Marian): a cache key, and how two checkpoints are found to share a vocabulary."""
        ...
