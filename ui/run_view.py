"""How the Training page words a run: the launch form's labels (no Streamlit here).

The launcher (:mod:`training.form`) names data sources and architectures by plain codes; the words for them live
here, with the page."""

from __future__ import annotations

#: :data:`training.form.DATA_SOURCES` as the form's radio shows them.
DATA_LABELS = {
    "sentences": "sentences",
    "sentences+phrases": "sentences + phrases",
    "sentences+phrases+words": "sentences + phrases + words",
    "tsv": "uploaded TSV",
    "brown": "Brown corpus (English)",
}
#: :data:`model.config.ARCHITECTURES` as the form's picker shows them.
ARCH_LABELS = {"encoder-decoder": "encoder-decoder (English → German translator)",
               "decoder-only": "decoder-only (GPT-style language model)"}
