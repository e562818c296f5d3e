"""GPT-2's byte-level alphabet (Radford et al. 2019): every byte stands for one printable character (space →
``Ġ``), and the pages show a piece as the text it spells (``Ġthe`` → ``␣the``) and read a typed piece back."""

from __future__ import annotations

import re
import unicodedata


def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2's byte → character table (Radford et al. 2019): printable bytes stand for themselves, the others
    (space, controls, …) for the characters from U+0100 on, in byte order (space → ``Ġ``, newline → ``Ċ``)."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    table, extra = {b: chr(b) for b in printable}, 0
    for b in range(256):
        if b not in table:
            table[b] = chr(256 + extra)
            extra += 1
    return table


BYTE_TO_CHAR = _bytes_to_unicode()
_CHAR_TO_BYTE = {c: b for b, c in BYTE_TO_CHAR.items()}
_SHOWN = {" ": "␣", "\n": "↵", "\t": "⇥"}


def _show_char(ch: str) -> str:
    if "\udc80" <= ch <= "\udcff":  # a byte of an incomplete UTF-8 sequence (surrogateescape)
        return f"<0x{ord(ch) - 0xDC00:02X}>"
    if ch in _SHOWN:
        return _SHOWN[ch]
    return f"<0x{ord(ch):02X}>" if unicodedata.category(ch) == "Cc" else ch


def readable_piece(piece: str) -> str:
    """A byte-level BPE piece as text: ``"Ġthe"`` → ``"␣the"``, ``"Ã¼"`` → ``"ü"``, a newline → ``"↵"``, a tab →
    ``"⇥"``; a byte that does not complete a UTF-8 character (``"ð"``, the first of an emoji's four) → ``"<0xF0>"``.
    A string that is not byte-level (a special token with characters outside the table) comes back unchanged."""
    try:
        data = bytes(_CHAR_TO_BYTE[c] for c in piece)
    except KeyError:
        return piece
    return "".join(_show_char(c) for c in data.decode("utf-8", errors="surrogateescape"))


_TYPED = {shown: ch for ch, shown in _SHOWN.items()}
_BYTE_MARK = re.compile(r"<0x([0-9A-Fa-f]{2})>")


def stored_piece(text: str) -> str:
    """:func:`readable_piece` undone: ``"␣the"`` → ``"Ġthe"``, ``"ü"`` → ``"Ã¼"``, ``"<0xF0>"`` → ``"ð"`` (so that a
    piece typed as the pages show it can be looked up)."""
    data = bytearray()
    for i, part in enumerate(_BYTE_MARK.split(text)):
        if i % 2:
            data.append(int(part, 16))
        else:
            data += "".join(_TYPED.get(c, c) for c in part).encode("utf-8", errors="surrogatepass")
    return "".join(BYTE_TO_CHAR[b] for b in data)


def byte_level_text(piece: str) -> str:
    """The text a byte-level piece or pre-tokenized word stands for (``"Ġthe"`` → ``" the"``); bytes that do not
    form UTF-8 become U+FFFD, and a string that is not byte-level comes back unchanged."""
    try:
        return bytes(_CHAR_TO_BYTE[c] for c in piece).decode("utf-8", errors="replace")
    except KeyError:
        return piece
