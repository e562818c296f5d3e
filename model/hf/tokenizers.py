"""The tokenizers of Hugging Face MarianMT and GPT-2 folders, each a :class:`~model.tokenizing.Tokenizer` as ours
(:class:`~model.tokenizer.TextTokenizer`) is.

* :class:`MarianTextTokenizer` (``Helsinki-NLP/opus-mt-*``): a SentencePiece unigram language model (Kudo 2018) read
  with ``sentencepiece``, mirroring ``transformers``' ``MarianTokenizer``: a leading language code such as
  ``>>de<<`` is one token; the rest goes to ``source.spm`` unchanged: the model's own normaliser (for opus-mt
  NFKC with whitespace folded) runs inside SentencePiece, and ``MarianTokenizer.normalize`` (Moses punctuation) is
  never called by its ``tokenize``. Each piece gets its id from ``vocab.json`` (a piece missing there is
  ``<unk>``); ids are decoded with ``target.spm``.
* :class:`GPT2TextTokenizer` (``gpt2``, ``distilgpt2``): byte-level BPE (Radford et al. 2019; BPE: Sennrich et al.
  2016) from ``tokenizer.json`` with ``tokenizers``, or from ``vocab.json`` + ``merges.txt``. Every byte is in the
  vocabulary, so nothing is unknown. :func:`model.hf.byte_level.readable_piece` shows its pieces (``Ġthe`` → ``␣the``).

Typed special-token spellings (``</s>``, ``<pad>``, ``<|endoftext|>``) stay plain text, as in ``TextTokenizer``:
``transformers`` turns them into the special ids by default, but our Transformer masks every ``pad_id`` in a source
(a typed ``<pad>`` would vanish from the encoder's view, while the reference pipeline attends to it), and a typed
``</s>`` would end the source mid-sentence. The output equals the reference called with
``split_special_tokens=True`` (tested).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Iterable

from model.hf.byte_level import readable_piece, stored_piece
from model.hf.families import family
from model.tokenizer import Encoding, replace_surrogates


def _read_json(path: Path, required: bool = True):
    if not path.is_file():
        if required:
            raise ValueError(f"{path.name} is missing from {path.parent}")
        return {}
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"{path.name} in {path.parent} is not valid JSON: {exc}") from exc


def _token_name(value, default: str) -> str:
    """A special token as ``tokenizer_config.json`` writes it: a string or an AddedToken dict (``{"content": …}``)."""
    if isinstance(value, dict):
        value = value.get("content")
    return value if isinstance(value, str) and value else default


def _clean_up(text: str) -> str:
    """``transformers``' ``clean_up_tokenization`` (only applied when ``tokenizer_config.json`` asks for it)."""
    for old, new in (
        (" .", "."),
        (" ?", "?"),
        (" !", "!"),
        (" ,", ","),
        (" ' ", "'"),
        (" n't", "n't"),
        (" 'm", "'m"),
        (" 's", "'s"),
        (" 've", "'ve"),
        (" 're", "'re"),
    ):
        text = text.replace(old, new)
    return text


class _PieceLookup:
    """``id_to_token`` / ``token_to_id`` / ``tokens`` / ``encode_batch`` over ``self._vocab`` (piece → id)."""

    _vocab: dict[str, int]
    _pieces: dict[int, str]

    def id_to_token(self, token_id: int) -> str:
        """The piece of ``token_id``; ``"<unk>"`` for an id outside the vocabulary (negative included)."""
        return self._pieces.get(int(token_id), "<unk>")

    def token_to_id(self, token: str) -> int | None:
        """The id of a vocabulary piece, ``None`` for any other string."""
        return self._vocab.get(token)

    def tokens(self, ids: Iterable[int]) -> list[str]:
        return [self.id_to_token(i) for i in ids]

    def encode(self, text: str) -> Encoding:
        raise NotImplementedError  # each tokenizer cuts text its own way

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        return [self.encode(t).ids for t in texts]

    #: How a word start is shown (:meth:`display`): SentencePiece's ``▁`` (the space before the word), as stored.
    word_start = "▁"

    @staticmethod
    def display(piece: str) -> str:
        """A piece as every page shows it: as stored (``"▁Haus"``)."""
        return piece

    @staticmethod
    def from_display(text: str) -> str:
        """The stored piece of a shown one (:meth:`display` undone): the same string."""
        return text

    @property
    def vocab_size(self) -> int:
        return len(self._vocab)


# --- Marian: SentencePiece unigram -------------------------------------------------------------------------------
def _load_spm(blob: bytes, name: str):
    import sentencepiece as spm

    sp = spm.SentencePieceProcessor()
    try:
        sp.LoadFromSerializedProto(blob)
    except Exception as exc:  # sentencepiece raises RuntimeError or OSError on a bad model
        raise ValueError(f"{name} is not a valid SentencePiece model: {exc}") from exc
    return sp


def split_language_code(text: str) -> tuple[str, str]:
    """``(code, rest)``: a text that starts with ``>>`` and has a ``<<`` later loses everything up to that ``<<`` as
    its language code (``">>de<< Hi"`` → ``(">>de<<", " Hi")``), exactly as ``MarianTokenizer`` does; otherwise
    ``("", text)``."""
    if text.startswith(">>") and (end := text.find("<<")) != -1:
        return text[: end + 2], text[end + 2 :]
    return "", text


class MarianTextTokenizer(_PieceLookup):
    """A MarianMT tokenizer: ``source.spm`` (unigram LM, Kudo 2018) cuts the source, ``vocab.json`` numbers the
    pieces, ``target.spm`` decodes. Ids and pieces equal ``MarianTokenizer(…)(text, add_special_tokens=False,
    split_special_tokens=True)``.

    Args:
        source_model, target_model: the serialized ``source.spm`` / ``target.spm``.
        vocab: ``vocab.json`` (piece → id, shared by source and target), with ``<unk>``, ``</s>`` and ``<pad>``.
        config: ``tokenizer_config.json`` (special-token names, ``clean_up_tokenization_spaces``), may be empty.

    Raises:
        ValueError: a model is not SentencePiece, the vocabulary lacks a special token, or the folder uses separate
            source and target vocabularies (``separate_vocabs``), which this app does not read.
    """

    kind = "unigram"
    backend = None  # no ``tokenizers.Tokenizer``: SentencePiece does the work
    bos_id = None  # Marian has no <bos>: the decoder starts from <pad>

    def __init__(self, source_model: bytes, target_model: bytes, vocab: dict[str, int], config: dict | None = None):
        config = config or {}
        if config.get("separate_vocabs"):
            raise ValueError(
                "tokenizer_config.json asks for separate source and target vocabularies, which are not supported"
            )
        if not isinstance(vocab, dict) or not all(isinstance(k, str) and isinstance(v, int) for k, v in vocab.items()):
            raise ValueError("vocab.json must map pieces to integer ids")
        self.source_model = _load_spm(source_model, "source.spm")
        self.target_model = _load_spm(target_model, "target.spm")
        self._vocab = dict(vocab)
        self._pieces = {i: p for p, i in vocab.items()}
        ids = {}
        for key, default in (("unk_token", "<unk>"), ("eos_token", "</s>"), ("pad_token", "<pad>")):
            name = _token_name(config.get(key), default)
            if name not in vocab:
                raise ValueError(f"vocab.json has no {name!r} ({key})")
            ids[key] = vocab[name]
        self.unk_id, self.eos_id, self.pad_id = ids["unk_token"], ids["eos_token"], ids["pad_token"]
        extra = [_token_name(t, "") for t in config.get("additional_special_tokens") or []]
        self._special_ids = set(ids.values()) | {vocab[t] for t in extra if t in vocab}
        self._clean = bool(config.get("clean_up_tokenization_spaces", False))
        digest = hashlib.sha256()
        for part in (
            source_model,
            target_model,
            json.dumps(vocab, sort_keys=True).encode(),
            json.dumps([sorted(ids.items()), sorted(self._special_ids), self._clean]).encode(),
        ):
            digest.update(hashlib.sha256(part).digest())
        self._id = json.dumps({"kind": self.kind, "sha256": digest.hexdigest(), "vocab_size": len(vocab)})

    @classmethod
    def from_folder(cls, folder: str | Path) -> "MarianTextTokenizer":
        """Read ``source.spm``, ``target.spm``, ``vocab.json`` and (optional) ``tokenizer_config.json``.
        Raises ``ValueError`` naming the file that is missing or invalid."""
        folder = Path(folder)
        blobs = []
        for name in ("source.spm", "target.spm"):
            if not (folder / name).is_file():
                raise ValueError(f"{name} is missing from {folder}")
            blobs.append((folder / name).read_bytes())
        vocab = _read_json(folder / "vocab.json")
        config = _read_json(folder / "tokenizer_config.json", required=False)
        return cls(blobs[0], blobs[1], vocab, config if isinstance(config, dict) else {})

    def to_str(self) -> str:
        """A stable string naming this tokenizer (a digest of its models, vocabulary and settings)."""
        return self._id

    split_language_code = staticmethod(split_language_code)

    def encode(self, text: str) -> Encoding:
        """Encode ``text`` without ``</s>``; special-token spellings are plain characters, a lone surrogate is read
        as U+FFFD.

        Offsets are ``(start, end)`` characters of ``text``, from SentencePiece's alignment of its normalised text
        with the original: a character that normalisation removes (a control character) belongs to the piece
        before it; a character that becomes several pieces (``ﬁ`` → ``f`` ``i``) is covered by the last of them,
        the others get an empty span, and so does a bare ``▁`` with no space before it in ``text``.
        """
        text = replace_surrogates(text or "")
        code, rest = self.split_language_code(text)
        ids, offsets = [], []
        if code:
            ids.append(self._vocab.get(code, self.unk_id))
            offsets.append((0, len(code)))
        if rest:
            out = self.source_model.encode(rest, out_type="offset_mapping")
            shift = len(code)
            for piece, (start, end) in zip(out["pieces"], out["offsets"], strict=True):
                ids.append(self._vocab.get(piece, self.unk_id))
                offsets.append((start + shift, end + shift))
        return Encoding(ids, self.tokens(ids), offsets)

    def decode(self, ids: Iterable[int]) -> str:
        """Text of ``ids`` by ``target.spm`` (``</s>``, ``<pad>`` and ``<unk>`` skipped), as ``MarianTokenizer``
        decodes with ``skip_special_tokens=True``."""
        pieces = [self._pieces[i] for i in map(int, ids) if i in self._pieces and i not in self._special_ids]
        text = self.target_model.decode_pieces(pieces).replace("▁", " ").strip()
        return _clean_up(text) if self._clean else text


# --- GPT-2: byte-level BPE ---------------------------------------------------------------------------------------
def _byte_level_from_vocab(vocab: Path, merges: Path):
    """The GPT-2 pipeline (ByteLevel pre-tokenizer, decoder and offsets) around ``vocab.json`` + ``merges.txt``."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors

    tok = Tokenizer(models.BPE.from_file(str(vocab), str(merges)))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    return tok


class GPT2TextTokenizer(_PieceLookup):
    """A GPT-2 tokenizer: byte-level BPE over a ``tokenizers.Tokenizer`` (Radford et al. 2019). Ids, pieces and
    offsets equal ``GPT2TokenizerFast(…)(text, add_special_tokens=False, split_special_tokens=True)``.

    Args:
        tokenizer: the byte-level BPE ``tokenizers.Tokenizer`` (``tokenizer.json``).
        config: ``tokenizer_config.json`` (special-token names, ``clean_up_tokenization_spaces``), may be empty.

    Raises:
        ValueError: the tokenizer is not BPE or lacks its ``<|endoftext|>`` (or configured ``eos_token``).
    """

    kind = "byte-bpe"
    unk_id = None  # every byte is a piece: nothing is unknown (GPT-2's nominal unk_token is <|endoftext|>)
    source_model = None  # BPE: no unigram model
    #: How a word start is shown: GPT-2 stores the space before a word as ``Ġ``, glued to it; pages show ``␣``.
    word_start = "␣"
    display = staticmethod(readable_piece)
    from_display = staticmethod(stored_piece)

    def __init__(self, tokenizer, config: dict | None = None):
        config = config or {}
        if type(tokenizer.model).__name__ != "BPE":
            raise ValueError(f"not a BPE tokenizer: {type(tokenizer.model).__name__}")
        self._tok = tokenizer
        eos = _token_name(config.get("eos_token"), "<|endoftext|>")
        self.eos_id = tokenizer.token_to_id(eos)
        if self.eos_id is None:
            raise ValueError(f"the tokenizer has no {eos!r}")
        self.bos_id = tokenizer.token_to_id(_token_name(config.get("bos_token"), eos))
        pad = _token_name(config.get("pad_token"), "")
        self.pad_id = tokenizer.token_to_id(pad) if pad else None  # gpt2 has none
        self._clean = bool(config.get("clean_up_tokenization_spaces", False))
        self._vocab = tokenizer.get_vocab(with_added_tokens=True)
        self._pieces = {i: p for p, i in self._vocab.items()}
        # Typed "<|endoftext|>" stays text (module docstring). Not stored in tokenizer.json.
        tokenizer.encode_special_tokens = True

    @classmethod
    def from_folder(cls, folder: str | Path) -> "GPT2TextTokenizer":
        """Read ``tokenizer.json`` or, without it, ``vocab.json`` + ``merges.txt``; ``tokenizer_config.json`` is
        optional. Raises ``ValueError`` naming the file that is missing or invalid."""
        from tokenizers import Tokenizer

        folder = Path(folder)
        path = folder / "tokenizer.json"
        config = _read_json(folder / "tokenizer_config.json", required=False)
        config = config if isinstance(config, dict) else {}
        if path.is_file():
            try:
                return cls(Tokenizer.from_file(str(path)), config)
            except Exception as exc:  # tokenizers raises a bare Exception on malformed JSON
                raise ValueError(f"tokenizer.json in {folder} is not a valid tokenizer: {exc}") from exc
        for name in ("vocab.json", "merges.txt"):
            if not (folder / name).is_file():
                raise ValueError(f"{folder} has neither tokenizer.json nor {name}")
        try:
            tok = _byte_level_from_vocab(folder / "vocab.json", folder / "merges.txt")
        except Exception as exc:
            raise ValueError(f"vocab.json / merges.txt in {folder} are not a valid BPE: {exc}") from exc
        eos = _token_name(config.get("eos_token"), "<|endoftext|>")
        tok.add_special_tokens([eos])
        return cls(tok, config)

    def to_str(self) -> str:
        """The tokenizer as a JSON string (what ``tokenizer.json`` holds)."""
        return self._tok.to_str()

    @property
    def backend(self):
        """The underlying ``tokenizers.Tokenizer`` (for merge replay)."""
        return self._tok

    def encode(self, text: str) -> Encoding:
        """Encode ``text`` without special tokens; offsets index into ``text`` (the pieces of one multi-byte
        character all cover that character). Special-token spellings are plain characters."""
        enc = self._tok.encode(replace_surrogates(text or ""), add_special_tokens=False)
        return Encoding(list(enc.ids), list(enc.tokens), [tuple(o) for o in enc.offsets])

    def decode(self, ids: Iterable[int]) -> str:
        """Text of ``ids``; special tokens (and ids outside the vocabulary) are skipped; bytes that do not form
        UTF-8 become U+FFFD."""
        text = self._tok.decode([i for i in map(int, ids) if i in self._pieces], skip_special_tokens=True)
        return _clean_up(text) if self._clean else text


#: Each tokenizer class of a Hugging Face family, by its ``kind`` (a family names the kind it uses).
BY_KIND = {cls.kind: cls for cls in (MarianTextTokenizer, GPT2TextTokenizer)}


def load_hf_tokenizer(folder: str | Path, model_type: str) -> MarianTextTokenizer | GPT2TextTokenizer:
    """The tokenizer of a Hugging Face folder of ``model_type`` (``config.json``'s), the kind its family names
    (:data:`model.hf.families.FAMILIES`): ``"marian"`` → :class:`MarianTextTokenizer`, ``"gpt2"`` →
    :class:`GPT2TextTokenizer`. Raises ``ValueError`` with a plain message naming the missing or invalid file, or
    the model type that is not supported."""
    return BY_KIND[family(model_type).tokenizer].from_folder(folder)
