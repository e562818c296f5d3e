"""Page "Tokenization": how the checkpoint's BPE tokenizer cuts a sentence, a step-by-step replay of its merges
for one word, vocabulary statistics, and a small live BPE trainer."""

import pandas as pd
import streamlit as st

from teaching.bpe_replay import merge_table, piece_lengths, pre_tokenize, replay, segmentations
from model.tokenizer import TextTokenizer
from ui import state, url
from ui.widgets import show_figure, show_table
from viz.labels import WORD_START_NOTE
from viz.teaching import bar, cell_html, pieces_html, token_spans_html

PLOT = dict(width="stretch", theme=None)
MAX_CHARS = 2000
TRAIN_MAX_CHARS = 20000
DEFAULT_TRAIN_TEXT = "\n".join(state.PRESETS)


@st.cache_resource(show_spinner=False, max_entries=4)
def _merges(path: str, mtime: float, tokenizer_json: str):  # path and mtime are the cache key
    return merge_table(tokenizer_json)


@st.cache_resource(show_spinner="Training a BPE…", max_entries=8)
def _train(text: str, vocab_size: int) -> TextTokenizer:
    lines = [line for line in text.splitlines() if line.strip()]
    return TextTokenizer.train(lines, vocab_size=vocab_size, min_frequency=1)


def merges_frame(merges, start: int) -> pd.DataFrame:
    return pd.DataFrame([{"rank": start + i, "left": a, "right": b, "new piece": a + b}
                         for i, (a, b) in enumerate(merges)])


ckpt = state.require_checkpoint()
tok = ckpt.tokenizer
table = _merges(*state.checkpoint_version(ckpt), tok.to_str())

st.title("Tokenization")
st.caption("The model never sees letters or words: a byte-pair-encoding (BPE) tokenizer (Sennrich et al. 2016) "
           "cuts the text into pieces from a vocabulary of "
           f"{tok.vocab_size} learned from the training data. " + WORD_START_NOTE + " Every page shows pieces this way.")

# --- the text -----------------------------------------------------------------------------------------
shared = state.current_text(ckpt)
url.init_widget("tok_text", lambda p: url.text_param(p, "tok_text", shared, MAX_CHARS, ))
text = st.text_area("Text", key="tok_text", height=80)
too_long = url.put_text("tok_text", text, shared)  # the shared sentence is in the link already
if too_long:
    st.caption(too_long)


def show_tokens(text: str) -> None:
    enc = tok.encode(text)
    st.subheader(f"{len(enc.tokens)} pieces")
    st.markdown(token_spans_html(text, enc.tokens, enc.ids, enc.offsets), unsafe_allow_html=True)
    st.caption("Each chip: the characters it covers (␣ = space), then the piece and its id. A dashed ∅ chip is "
               "a bare `▁` word-start marker that covers no character of its own.")
    unk = [text[s:e] for p, (s, e) in zip(enc.tokens, enc.offsets) if p == "<unk>"]
    if unk:
        st.warning(f"{len(unk)} piece(s) are `<unk>` (red): the characters {', '.join(repr(u) for u in unk)} "
                   "never occurred in the training data, so the model cannot tell them apart.")

    st.subheader("Characters, words, pieces")
    seg = segmentations(text, enc.tokens)
    show_table([{"unit": k, "count": len(v), "sequence": " | ".join(v)} for k, v in seg.items()])
    st.caption("Characters give long sequences over a tiny alphabet; words a huge vocabulary with no answer "
               "for unseen words; BPE pieces sit in between.")

    st.subheader("Replay the merges for one word")
    words = pre_tokenize(tok.backend, text)
    if not words:
        st.warning("There is no word to replay.")
        return
    url.init_widget("tok_word", lambda p: url.int_param(p, "word", 0, 0, len(words) - 1, what="word number"),
                    valid=lambda i: i in range(len(words)))
    ss = st.session_state
    if ss.get("tok_word_of") not in (None, words):
        # A new text: the box's value (a word number) may be unchanged while its label ("2: ▁word") is not. A
        # keyed selectbox keeps its identity when its options change, and the browser goes on showing the label
        # it last drew until the script sets the value, so set it (to itself) to send the new label.
        ss["tok_word"] = ss["tok_word"]
    ss["tok_word_of"] = words
    choice = st.selectbox("Word (as BPE sees it, after pre-tokenization)", range(len(words)),
                          format_func=lambda i: f"{i}: {words[i]}", key="tok_word")
    url.put("word", choice, 0)
    word = words[choice]
    steps = replay(word, table)
    rows = []
    for n, step in enumerate(steps):
        if step.merge is None:
            mark = [False] * len(step.pieces)
            how = "start: the characters"
        else:
            joined = step.merge[0] + step.merge[1]
            mark = [p == joined for p in step.pieces]
            a, b = (cell_html(x) for x in step.merge)
            how = f"merge #{step.rank}: <code>{a}</code> + <code>{b}</code>"
        rows.append(f"| {n} | {how} | {pieces_html(step.pieces, mark)} |")
    st.markdown("| step | rule (lowest rank present) | pieces |\n|---|---|---|\n" + "\n".join(rows),
                unsafe_allow_html=True)
    final = steps[-1].pieces
    alone = word[1:] if word.startswith("▁") else word  # Metaspace puts the ▁ back in front of a lone word
    expected = (tok.backend.encode(alone, add_special_tokens=False).tokens
                if alone and pre_tokenize(tok.backend, alone) == [word] else None)
    st.caption(f"Final: {' '.join(final)} — the tokenizer's own output for this word"
               + ("" if expected is None or expected == final else f" differs: {' '.join(expected)}") + ".")


if not text.strip():
    st.warning("Type some text to tokenize.")
elif len(text) > MAX_CHARS:
    st.warning(f"Please keep the text under {MAX_CHARS} characters (it has {len(text)}).")
else:
    show_tokens(text)

# --- vocabulary ---------------------------------------------------------------------------------------
st.subheader("The vocabulary")
lengths = piece_lengths(table.vocab)
counts = pd.Series(lengths).value_counts().sort_index()
show_figure(bar(counts.index.tolist(), counts.values.tolist(), "Piece length (characters, ▁ not counted)",
                 "length", "pieces"), **PLOT)
c1, c2 = st.columns(2)
c1.markdown("**First 20 merges** (the most frequent pairs)")
show_table(merges_frame(table.merges[:20], 0), c1)
c2.markdown("**Last 20 merges**")
start = max(0, len(table.merges) - 20)
show_table(merges_frame(table.merges[start:], start), c2)

# --- live trainer ---------------------------------------------------------------------------------------
st.subheader("Train your own BPE")
url.init_widget("bpe_train_text", lambda p: url.text_param(p, "train_text", DEFAULT_TRAIN_TEXT, TRAIN_MAX_CHARS,
                                                            what="training text"))
url.init_widget("bpe_vocab", lambda p: url.int_param(p, "vocab", 120, 30, 2000, what="vocabulary size"))
train_text = st.text_area("Training text (one sentence per line)", key="bpe_train_text", height=140)
too_long = url.put_text("train_text", train_text, DEFAULT_TRAIN_TEXT)
if too_long:
    st.caption(too_long)
vocab_size = st.slider("Vocabulary size (specials and single characters included)", 30, 2000, key="bpe_vocab")
url.put("vocab", vocab_size, 120)
if not train_text.strip():
    st.warning("Paste some text to train on.")
else:
    if len(train_text) > TRAIN_MAX_CHARS:
        st.warning(f"Only the first {TRAIN_MAX_CHARS} characters are used.")
        train_text = train_text[:TRAIN_MAX_CHARS]
    mine = _train(train_text, vocab_size)
    my_table = merge_table(mine.to_str())
    st.markdown(f"Learned **{len(my_table.merges)}** merges; vocabulary **{mine.vocab_size}** pieces "
                f"(asked for {vocab_size}; all characters seen are always kept).")
    show_table(merges_frame(my_table.merges[:20], 0))
    first = next(line for line in train_text.splitlines() if line.strip())
    enc = mine.encode(first)
    st.markdown(token_spans_html(first, enc.tokens, enc.ids, enc.offsets), unsafe_allow_html=True)
    st.caption("The first line of the training text, cut by the BPE you just trained. More merges → longer pieces.")
