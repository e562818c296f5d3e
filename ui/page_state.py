"""Each page's own keys in a browser session: what it forgets when the checkpoint or the shared sentence changes.

A page's widgets keep their values in ``st.session_state`` under keys of that page, mirrored in the link by query
parameters. Two events cross pages: picking another checkpoint (a layer or head index of one model means nothing
to another) and a new shared sentence (a step or an ablation sweep belongs to one sentence). Each page says here,
once, which of its keys and parameters each event clears, and which text box shows the shared sentence; the
checkpoint picker and the sentence boxes (:mod:`ui.state`) go through :data:`PAGES` instead of knowing any other
page's keys.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import MutableMapping


@dataclass(frozen=True)
class PageState:
    """What one page keeps for a browser session.

    Attributes:
        page: the page's script name (``app_pages/<page>.py``).
        text_key: the widget key of its text box that shows the shared sentence (``None``: it has none).
        model_keys / model_params: widget keys and link parameters whose values belong to one model (its layers,
            heads, attention kinds): forgotten when another checkpoint is picked.
        sentence_keys / sentence_params: session keys and link parameters that belong to one sentence (a step, a
            sweep that was asked for): forgotten when the shared sentence changes.
    """

    page: str
    text_key: str | None = None
    model_keys: tuple[str, ...] = ()
    model_params: tuple[str, ...] = ()
    sentence_keys: tuple[str, ...] = ()
    sentence_params: tuple[str, ...] = ()

    def forget_model(self, session: MutableMapping, params: MutableMapping) -> None:
        """Another checkpoint was picked: this page starts it at its own defaults."""
        _forget(session, params, self.model_keys, self.model_params)

    def forget_sentence(self, session: MutableMapping, params: MutableMapping) -> None:
        """A new shared sentence: what belonged to the old one goes (its step, a sweep asked for)."""
        _forget(session, params, self.sentence_keys, self.sentence_params)

    def show_sentence(self, session: MutableMapping, text: str) -> None:
        """Put ``text`` into this page's text box (if it has one that has been drawn in this session)."""
        if self.text_key is not None and self.text_key in session:
            session[self.text_key] = text


def _forget(session: MutableMapping, params: MutableMapping, keys: tuple[str, ...], names: tuple[str, ...]) -> None:
    for key in keys:
        session.pop(key, None)
    for name in names:
        params.pop(name, None)


# the attribution view's layer and head belong to a model; its line over the steps and the what-if's word to a
# sentence
TRANSLATE = PageState("translate", text_key="text_input",
                      model_keys=("tr_layer", "tr_head", "tr_attr_layer", "tr_attr_head"),
                      model_params=("layer", "head", "attr_layer", "attr_head"),
                      sentence_keys=("step", "tr_attr_line", "tr_attr_word", "tr_attr_with"),
                      sentence_params=("step", "whatif_word", "whatif_with"))
ATTENTION = PageState("attention", text_key="attn_text",
                      model_keys=("attn_kind", "attn_layer", "attn_head", "attn_ablate"),
                      model_params=("kind", "layer", "head", "ablate"),
                      sentence_keys=("_attn_sweep_for",), sentence_params=("sweep",))
# its step and forced tokens follow its own sentence key; the beam settings' defaults belong to a model (a Hugging
# Face folder may state its own), so they are read again from the link for the next one
DECODING = PageState("decoding", text_key="dl_text",
                     model_keys=("dl_settings", "dl_w_beam", "dl_w_alpha", "dl_attr_layer", "dl_attr_head"),
                     sentence_keys=("dl_attr_line", "dl_attr_word", "dl_attr_with"),
                     sentence_params=("whatif_word", "whatif_with"))
POSITIONAL = PageState("positional", model_keys=("pe_head",))
# the live numbers' kind, layer and head (ui.lecture_live) belong to a model; the editable matrices to none
LECTURE = PageState("lecture", text_key="wl_text", model_keys=("wl_kind", "wl_layer", "wl_head"),
                    model_params=("kind", "layer", "head"))
#: Every page with keys that a checkpoint switch or a new sentence touches.
PAGES = (TRANSLATE, ATTENTION, DECODING, POSITIONAL, LECTURE)
