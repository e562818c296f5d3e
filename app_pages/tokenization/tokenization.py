"""Page "Tokenization": how the checkpoint's tokenizer cuts a sentence, then what that tokenizer really is: for BPE
(ours, GPT-2's byte-level BPE) a step-by-step replay of its merges for one word, for a unigram model (MarianMT) the
scored best split of one word and its runners-up; vocabulary statistics; and a small live BPE trainer."""

from dataclasses import dataclass
from types import MappingProxyType

import pandas as pd
import streamlit as st

from charts.teaching import bar, cell_html, pieces_html, token_spans_html
from model.tokenizer import TextTokenizer
from serving import heavy
from teaching import unigram
from teaching.bpe_replay import MergeTable, merge_table, own_pieces, piece_lengths, pre_tokenize, replay, segmentations
from ui import checkpoints, pieces, state, url
from ui.limits import limits
from ui.widgets import show_figure, show_table

PLOT = dict(width="stretch", theme=None)
DEFAULT_TRAIN_TEXT = "\n".join(state.PRESETS)


@st.cache_resource(show_spinner=False, max_entries=4)
def _merges(path: str, mtime: float, tokenizer_json: str) -> MergeTable:  # path and mtime are the cache key
    """The checkpoint's merges, shared by every session: read-only (a tuple and mapping proxies), so that no page
    code can change what the other visitors read."""
    table = merge_table(tokenizer_json)
    return MergeTable(tuple(table.merges), MappingProxyType(table.ranks), MappingProxyType(table.vocab), table.unk)


@dataclass(frozen=True)
class TrainedBPE:
    """What the page shows of a BPE trained on a visitor's text, as one immutable value: every session that trains
    on the same text and size gets this very object, so nothing in it can be changed (a tokenizer can: its
    truncation, padding and special-token settings are mutable). ``merges``: (left, right) in rank order;
    ``first``: the first line, cut by it, as (piece, id, (start, end)) per piece."""

    merges: tuple[tuple[str, str], ...]
    vocab_size: int
    first_line: str
    first: tuple[tuple[str, int, tuple[int, int]], ...]


def train_bpe(text: str, vocab_size: int) -> TrainedBPE:
    """A BPE trained on ``text`` (one sentence per line, blank lines skipped) and what the page shows of it."""
    lines = [line for line in text.splitlines() if line.strip()]
    mine = TextTokenizer.train(lines, vocab_size=vocab_size, min_frequency=1)
    enc = mine.encode(lines[0])
    return TrainedBPE(
        merges=tuple((a, b) for a, b in merge_table(mine.to_str()).merges),
        vocab_size=mine.vocab_size,
        first_line=lines[0],
        first=tuple(zip(enc.tokens, enc.ids, ((s, e) for s, e in enc.offsets), strict=True)),
    )


def trained(text: str, vocab_size: int) -> TrainedBPE:
    """:func:`train_bpe` through the gate for heavy work: a room pasting texts trains one at a time, each distinct
    (text, size) once, and a visitor waiting in line is told so."""
    return heavy.shared(("bpe-train", text, vocab_size), lambda: train_bpe(text, vocab_size), "training a BPE")


def merges_frame(merges, start: int, show=str) -> pd.DataFrame:
    return pd.DataFrame(
        [
            {"rank": start + i, "left": show(a), "right": show(b), "new piece": show(a + b)}
            for i, (a, b) in enumerate(merges)
        ]
    )


ckpt = checkpoints.require_checkpoint()
tok = ckpt.tokenizer
kind = tok.kind  # "bpe" (ours), "byte-bpe" (GPT-2) or "unigram" (MarianMT): a unigram model has no merges to replay
show = tok.display  # how a piece is written on this page, as on every page (ui.pieces)
table = None if kind == "unigram" else _merges(*checkpoints.checkpoint_version(ckpt), tok.to_str())


def pick_word(label: str, words: list[str]) -> int:
    """The word box (its number kept in ``?word=``): the index of the chosen word."""
    url.init_widget(
        "tk_word",
        lambda p: url.int_param(p, "word", 0, 0, len(words) - 1, what="word number"),
        valid=lambda i: i in range(len(words)),
    )
    ss = st.session_state
    if ss.get("tk_word_of") not in (None, words):
        # A new text: the box's value (a word number) may be unchanged while its label ("2: ▁word") is not. A
        # keyed selectbox keeps its identity when its options change, and the browser goes on showing the label
        # it last drew until the script sets the value, so set it (to itself) to send the new label.
        ss["tk_word"] = ss["tk_word"]
    ss["tk_word_of"] = words
    choice = st.selectbox(label, range(len(words)), format_func=lambda i: f"{i}: {show(words[i])}", key="tk_word")
    url.put("word", choice, 0)
    return choice


def show_tokens(text: str) -> None:
    enc = tok.encode(text)
    st.subheader(f"{len(enc.tokens)} pieces")
    st.markdown(token_spans_html(text, [show(t) for t in enc.tokens], enc.ids, enc.offsets), unsafe_allow_html=True)
    st.caption(
        "Each chip: the characters it covers (␣ = space), then the piece and its id. "
        + (
            "Pieces of one character that has several bytes all cover that character."
            if kind == "byte-bpe"
            else "A dashed ∅ chip is a bare `▁` word-start marker that covers no character of its own."
        )
    )
    unk = [text[s:e] for p, (s, e) in zip(enc.tokens, enc.offsets, strict=True) if p == "<unk>"]
    if unk:
        st.warning(
            f"{len(unk)} piece(s) are `<unk>` (red): the characters {', '.join(repr(u) for u in unk)} "
            "never occurred in the training data, so the model cannot tell them apart."
        )

    st.subheader("Characters, words, pieces")
    seg = segmentations(text, [show(t) for t in enc.tokens])
    show_table([{"unit": k, "count": len(v), "sequence": " | ".join(v)} for k, v in seg.items()])
    st.caption(
        "Characters give long sequences over a tiny alphabet; words a huge vocabulary with no answer "
        "for unseen words; BPE pieces sit in between."
    )

    if table is None:  # a unigram tokenizer: no merges to replay
        show_unigram(text)
        return
    st.subheader("Replay the merges for one word")
    words = pre_tokenize(tok.backend, text)
    if not words:
        st.warning("There is no word to replay.")
        return
    word = words[pick_word("Word (as BPE sees it, after pre-tokenization)", words)]
    steps = replay(word, table)
    rows = []
    for n, step in enumerate(steps):
        if step.merge is None:
            mark = [False] * len(step.pieces)
            how = "start: the characters" if kind == "bpe" else "start: the bytes"
        else:
            joined = step.merge[0] + step.merge[1]
            mark = [p == joined for p in step.pieces]
            a, b = (cell_html(show(x)) for x in step.merge)
            how = f"merge #{step.rank}: <code>{a}</code> + <code>{b}</code>"
        rows.append(f"| {n} | {how} | {pieces_html([show(p) for p in step.pieces], mark)} |")
    st.markdown(
        "| step | rule (lowest rank present) | pieces |\n|---|---|---|\n" + "\n".join(rows), unsafe_allow_html=True
    )
    final = steps[-1].pieces
    expected = own_pieces(tok.backend, word, byte_level=kind == "byte-bpe")
    st.caption(
        f"Final: {' '.join(map(show, final))} — the tokenizer's own output for this word"
        + ("" if expected is None or expected == final else f" differs: {' '.join(map(show, expected))}")
        + "."
    )


def show_unigram(text: str) -> None:
    st.subheader("How the unigram model picks the split of one word")
    words = unigram.words(tok, text)
    if not words:
        st.warning("There is no word to split.")
        return
    splits = unigram.best_splits(tok, words[pick_word("Word", words)], n=5)
    if not splits:
        st.warning("This word is only characters the tokenizer removes.")
        return
    c1, c2 = st.columns(2)
    c1.markdown("**The best split (Viterbi), piece by piece**")
    show_table(unigram.piece_rows(tok, splits[0]), c1)
    c2.markdown(f"**The {len(splits)} most probable splits**")
    show_table(unigram.split_rows(splits), c2)
    st.caption(
        "Each piece has a probability p learned from the training text; a split's probability is the "
        "product of its pieces' (log P: the sum of their log p), and the tokenizer takes the most probable "
        "split (first row). Fewer, longer pieces usually win, because every extra factor p < 1 lowers the "
        "product. BPE instead replays its learned merges in order and never weighs alternatives."
    )


@st.fragment
def tokenization_page() -> None:
    """The page below the sidebar, as a fragment: a text, a word or a vocabulary size reruns this, not the app
    around it (the navigation, the sidebar's picker and summary)."""
    st.title("Tokenization")
    if table is None:  # a unigram tokenizer: no merges to replay
        st.caption(
            "The model never sees letters or words: a SentencePiece unigram language-model tokenizer "
            f"(Kudo 2018) cuts the text into pieces from a vocabulary of {tok.vocab_size}, each piece with a "
            "learned probability; of all ways to cut a word it takes the most probable. " + pieces.word_note(tok)
        )
    elif kind == "byte-bpe":
        st.caption(
            "The model never sees letters or words: a byte-level byte-pair-encoding (BPE) tokenizer "
            "(Radford et al. 2019; BPE: Sennrich et al. 2016) cuts the text's UTF-8 bytes into pieces from a "
            f"vocabulary of {tok.vocab_size}, so no text is unknown. It stores a space as `Ġ`, glued to the "
            "word after it; every page writes it `␣`, and a byte that is only part of a character (an emoji is "
            "four) as `<0xF0>`."
        )
    else:
        st.caption(
            "The model never sees letters or words: a byte-pair-encoding (BPE) tokenizer (Sennrich et al. "
            "2016) cuts the text into pieces from a vocabulary of "
            f"{tok.vocab_size} learned from the training data. "
            + pieces.word_note(tok)
            + " Every page shows pieces this way."
        )

    # --- the text -----------------------------------------------------------------------------------------
    shared = state.current_text(ckpt)
    caps = limits()  # the one place for input caps (ui/limits.py), the hosted demo's shorter ones included
    url.init_widget("tk_text", lambda p: url.text_param(p, "tok_text", shared, caps.max_chars))
    text = st.text_area("Text", key="tk_text", height=80)
    too_long = url.put_text("tok_text", text, shared)  # the shared sentence is in the link already
    if too_long:
        st.caption(too_long)

    if not text.strip():
        st.warning("Type some text to tokenize.")
    elif too_long := caps.too_long(text):
        st.warning(too_long)
    else:
        show_tokens(text)

    # --- vocabulary ---------------------------------------------------------------------------------------
    st.subheader("The vocabulary")
    if table is None:  # a unigram tokenizer: no merges to replay
        lengths = piece_lengths(dict.fromkeys(unigram.unigram_pieces(tok)))
    elif kind == "byte-bpe":
        lengths = piece_lengths(table.vocab, specials=(tok.id_to_token(tok.eos_id),), show=show)
    else:
        lengths = piece_lengths(table.vocab)
    counts = pd.Series(lengths).value_counts().sort_index()
    show_figure(
        bar(
            counts.index.tolist(),
            counts.values.tolist(),
            "Piece length (characters, " + ("␣" if kind == "byte-bpe" else "▁") + " not counted)",
            "length",
            "pieces",
        ),
        **PLOT,
    )
    c1, c2 = st.columns(2)
    if table is None:  # a unigram tokenizer: no merges to replay
        most, least = unigram.vocab_extremes(tok, 20)
        c1.markdown("**The 20 most probable pieces**")
        show_table(most, c1)
        c2.markdown("**The 20 least probable pieces**")
        show_table(least, c2)
    else:
        c1.markdown("**First 20 merges** (the most frequent pairs)")
        show_table(merges_frame(table.merges[:20], 0, show), c1)
        c2.markdown("**Last 20 merges**")
        start = max(0, len(table.merges) - 20)
        show_table(merges_frame(table.merges[start:], start, show), c2)

    # --- live trainer ---------------------------------------------------------------------------------------
    st.subheader("Train your own BPE")
    url.init_widget(
        "tk_train_text",
        lambda p: url.text_param(p, "train_text", DEFAULT_TRAIN_TEXT, caps.train_text_chars, what="training text"),
    )
    url.init_widget("tk_vocab", lambda p: url.int_param(p, "vocab", 120, 30, 2000, what="vocabulary size"))
    train_text = st.text_area("Training text (one sentence per line)", key="tk_train_text", height=140)
    too_long = url.put_text("train_text", train_text, DEFAULT_TRAIN_TEXT)
    if too_long:
        st.caption(too_long)
    vocab_size = st.slider("Vocabulary size (specials and single characters included)", 30, 2000, key="tk_vocab")
    url.put("vocab", vocab_size, 120)
    if not train_text.strip():
        st.warning("Paste some text to train on.")
    else:
        if len(train_text) > caps.train_text_chars:
            st.warning(f"Only the first {caps.train_text_chars:,} characters are used.")
            train_text = train_text[: caps.train_text_chars]
        mine = trained(train_text, vocab_size)
        st.markdown(
            f"Learned **{len(mine.merges)}** merges; vocabulary **{mine.vocab_size}** pieces "
            f"(asked for {vocab_size}; all characters seen are always kept)."
        )
        show_table(merges_frame(mine.merges[:20], 0))
        tokens, ids, offsets = zip(*mine.first, strict=True) if mine.first else ((), (), ())
        st.markdown(token_spans_html(mine.first_line, tokens, ids, offsets), unsafe_allow_html=True)
        st.caption("The first line of the training text, cut by the BPE you just trained. More merges → longer pieces.")


tokenization_page()
