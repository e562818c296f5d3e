"""What a Hugging Face folder says about decoding: its ``generation_config.json``, as ``transformers``' ``generate``
reads it, for the defaults the pages choose for that model.

``generate`` reads ``generation_config.json``, or, in a folder without one (older downloads), the same keys from
``config.json``; so does :func:`model.hf.loader.read_generation`, and :func:`parse_generation` reads the keys our
decodings have a counterpart for:

* ``max_length`` / ``max_new_tokens``: the length cap of a decoding (:meth:`GenerationDefaults.length_cap`).
  ``max_length`` counts the decoder's whole sequence, its start token or a decoder-only model's prompt included;
  ``max_new_tokens``, which wins when both are set, only the new tokens.
* ``num_beams`` and ``length_penalty``: the Decoding lab's beam width and length penalty
  (:meth:`GenerationDefaults.beam_defaults`). ``transformers`` divides a finished beam's log-probability by
  ``length ** length_penalty``, the lab by GNMT's ``((5 + length) / 6) ** α`` (Wu et al. 2016): the same number
  weighs length a little differently, and the page says so.
* ``bad_words_ids``: banned one-token words are never generated; the loader adds them to
  ``ModelConfig.suppress_ids``, as :mod:`model.hf.config` does with ``config.json``'s.

* ``forced_eos_token_id``: a decoding that reaches the length cap ends with this token, as ``generate``'s
  ``ForcedEOSTokenLogitsProcessor`` makes it (:class:`~decoding.stepping.Stepper`'s ``forced_eos_id``: greedy and
  sampled decodings; the pages say when it happened).

Not applied: ``forced_eos_token_id`` in beam search (its beams stop at the cap unfinished), sampling settings (the
pages' greedy decoding is greedy, their sampling is the visitor's), ``early_stopping``, ``min_length``,
``no_repeat_ngram_size`` and ``repetition_penalty``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from model.config import decoder_prefix, default_max_new_tokens
from model.errors import CheckpointError

FILE = "generation_config.json"


@dataclass(frozen=True)
class GenerationDefaults:
    """The decoding settings a Hugging Face folder states (``None``: it states none).

    Attributes:
        source: the file they were read from, ``"generation_config.json"`` or ``"config.json"``.
        max_length: the longest decoder sequence, start token or prompt included (tokens).
        max_new_tokens: the most tokens a decoding adds (wins over ``max_length``).
        num_beams: the beam width of ``generate``.
        length_penalty: ``generate``'s exponent of the length a finished beam's log-probability is divided by.
        bad_words_ids: the one-token banned words' ids.
        forced_eos_token_id: the token a decoding that reaches the length cap ends with.
    """

    source: str = FILE
    max_length: int | None = None
    max_new_tokens: int | None = None
    num_beams: int | None = None
    length_penalty: float | None = None
    bad_words_ids: tuple[int, ...] = ()
    forced_eos_token_id: int | None = None

    def length_cap(self, prefix_len: int) -> int | None:
        """The most new tokens a decoding whose decoder starts from ``prefix_len`` tokens (``<bos>``, or a
        decoder-only model's ``<bos>`` + prompt) may add, as ``generate`` counts them: ``max_new_tokens``, else
        ``max_length − prefix_len`` (at least 1: ``generate`` adds one token before it checks the length);
        ``None`` when the folder states no length."""
        if self.max_new_tokens is not None:
            return self.max_new_tokens
        if self.max_length is not None:
            return max(1, self.max_length - prefix_len)
        return None

    def beam_defaults(self) -> dict:
        """The Decoding lab's defaults this folder states: ``{"beam": num_beams, "alpha": length_penalty}``, each
        only when stated."""
        out = {"beam": self.num_beams, "alpha": self.length_penalty}
        return {k: v for k, v in out.items() if v is not None}

    def beam_note(self) -> str | None:
        """One sentence for the Decoding lab saying which of its beam defaults come from this file, and how
        ``transformers``' length penalty differs from the lab's; ``None`` when the file states neither."""
        said = []
        if self.num_beams is not None:
            said.append(f"beam width {self.num_beams}")
        if self.length_penalty is not None:
            said.append(f"length penalty {self.length_penalty:g}")
        if not said:
            return None
        note = f"{' and '.join(said).capitalize()} from this model's {self.source}"
        if self.length_penalty is not None:
            note += (
                " (transformers divides a beam's log P by length^penalty, this lab by ((5 + length) / 6)^α, "
                "so long beams may rank differently)"
            )
        return note + "."


def decoding_cap(cfg, src_ids: list[int], generation: GenerationDefaults | None) -> int:
    """The length cap of a decoding of ``src_ids`` (a translator's source, or a decoder-only model's prompt): what
    a Hugging Face model's ``generation`` states (:meth:`GenerationDefaults.length_cap` of the decoder's prefix),
    else :func:`~decoding.stepping.default_max_new_tokens`, as for our own checkpoints (``generation`` ``None``).
    :class:`~decoding.stepping.Stepper` keeps it within ``cfg.max_len``."""
    cap = generation.length_cap(len(decoder_prefix(cfg, src_ids, None))) if generation else None
    return default_max_new_tokens(cfg, len(src_ids)) if cap is None else cap


def forced_eos(generation: GenerationDefaults | None) -> int | None:
    """The token a decoding at the length cap must end with (``forced_eos_token_id``), for
    :class:`~decoding.stepping.Stepper`'s ``forced_eos_id``; ``None`` for our checkpoints (``generation`` ``None``)
    and for a folder that forces none."""
    return generation.forced_eos_token_id if generation else None


def _whole(value, key: str, where: str, least: int = 1, what: str = "a whole number") -> int | None:
    """``value`` when it is an int ≥ ``least`` (``None`` stays ``None``). Raises ``CheckpointError`` naming
    ``key``, the file (``where``) and ``what`` was expected."""
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < least:
        raise CheckpointError(f"{where}: {key} must be {what} ≥ {least}, got {value!r}")
    return value


def _number(value, key: str, where: str) -> float | None:
    if value is None:
        return None
    if not isinstance(value, (int, float)) or isinstance(value, bool) or value != value:
        raise CheckpointError(f"{where}: {key} must be a number, got {value!r}")
    return float(value)


def _one_token_words(value, where: str) -> tuple[int, ...]:
    """The ids of ``bad_words_ids``' one-token words (``[[58100]]`` → ``(58100,)``); longer words are sequences
    our decodings do not ban."""
    if value is None:
        return ()
    if not isinstance(value, list) or not all(
        isinstance(w, list) and w and all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in w)
        for w in value
    ):
        raise CheckpointError(f"{where}: bad_words_ids must be a list of lists of token ids, got {value!r}")
    return tuple(sorted({w[0] for w in value if len(w) == 1}))


def parse_generation(data: dict, source: str, folder: str | Path) -> GenerationDefaults:
    """The decoding settings in ``data``, the parsed ``source`` file (``generation_config.json``, or
    ``config.json`` in a folder without one) of ``folder``.

    Raises:
        CheckpointError: a key read here has a value of the wrong type (the message names the file and the key).
    """
    where = f"{source} in {folder}"
    return GenerationDefaults(
        source=source,
        max_length=_whole(data.get("max_length"), "max_length", where),
        max_new_tokens=_whole(data.get("max_new_tokens"), "max_new_tokens", where),
        num_beams=_whole(data.get("num_beams"), "num_beams", where),
        length_penalty=_number(data.get("length_penalty"), "length_penalty", where),
        bad_words_ids=_one_token_words(data.get("bad_words_ids"), where),
        forced_eos_token_id=_whole(data.get("forced_eos_token_id"), "forced_eos_token_id", where, 0, "a token id"),
    )
