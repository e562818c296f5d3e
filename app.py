"""Attention Explorer — entry point: page config, navigation and the sidebar checkpoint picker.

Run with ``make run`` (or ``streamlit run app.py``).
"""

import streamlit as st

from serving import heavy, memory, memory_probe, metrics
from ui import presentation, responsive
from ui.limits import limits
from ui.state import checkpoint_picker

heavy.configure_torch()  # one torch thread per computation: a server's cores belong to all its visitors
metrics.publish()  # the gate's state on /_stcore/metrics, for the load benchmark and a watchdog
memory.keep_giving_back()  # large blocks unmapped when freed, the rest trimmed: visitors leave, caches drop entries
memory_probe.start_if_asked()  # where the memory goes, only when a soak sets its environment switch

# Presentation mode is read first (from this session's toggle, or ?present=1 on a first visit): the sidebar
# starts collapsed in it. A later call with another state collapses or opens it when the toggle changes.
presenting = presentation.init()
st.set_page_config(
    page_title="Attention Explorer",
    page_icon="🔭",
    layout="wide",
    initial_sidebar_state="collapsed" if presenting else "auto",
)

# The page scripts live in app_pages/, not pages/: with a pages/ folder next to app.py, Streamlit's legacy
# multipage mode runs a deep link (/attention, /translate) as that page script alone, without this file,
# until some visit to "/" has called st.navigation (no sidebar picker, "No model is available").
pages = [
    st.Page(
        "app_pages/translate/translate.py",
        url_path="translate",
        title="Translate",
        icon=":material/translate:",
        default=True,
    ),
    st.Page("app_pages/attention/attention.py", url_path="attention", title="Attention", icon=":material/grid_on:"),
    st.Page("app_pages/decoding/decoding.py", url_path="decoding", title="Decoding lab", icon=":material/casino:"),
    st.Page(
        "app_pages/positional/positional.py",
        url_path="positional",
        title="Positional encoding",
        icon=":material/waves:",
    ),
    st.Page(
        "app_pages/tokenization/tokenization.py",
        url_path="tokenization",
        title="Tokenization",
        icon=":material/content_cut:",
    ),
    st.Page("app_pages/lecture/lecture.py", url_path="lecture", title="Worked examples", icon=":material/calculate:"),
    st.Page("app_pages/training/training.py", url_path="training", title="Training", icon=":material/model_training:"),
]
nav = st.navigation(pages)
# Less empty space above the title, and the next-token list's rows set closer than the page's 1.6 lines: more of
# each step fits on a projector (at 1280×720, Translate's ten rows end above the fold even under a three-line
# output and the far-from-training warning: a smaller title, closer elements and a tighter warning on its left).
# (Styles go into the sidebar: an element in the page would add a gap above the title.)
st.sidebar.markdown(
    "<style>.block-container{padding:3.4rem 3rem 1rem 3rem}"
    "[data-testid=stMain] h1{padding-top:0 !important}"
    ".ae-topk-row{line-height:1.25}"
    ".st-key-tr_box_main{gap:0.6rem}"
    ".st-key-tr_box_main h1{font-size:2.4rem;padding-bottom:0.2rem}"
    ".st-key-tr_box_main [data-testid=stAlertContainer]{padding:0.45rem 0.8rem}"
    # the logit lens in a column under 560 px (Translate's at 1280 px): four guesses a
    # layer, each piece whole, instead of five broken over two lines
    "@container (max-width: 560px){.ae-lens tr > :nth-child(7){display:none}}</style>" + responsive.CSS,
    unsafe_allow_html=True,
)

st.sidebar.title("Attention Explorer")
st.sidebar.caption(
    "Transformers we trained ourselves, opened up one token at a time: an English → German "
    "translator and an English language model."
)
st.session_state["app_ckpt_path"] = checkpoint_picker()
presentation.sidebar_toggle()
if (caps := limits()).demo:
    st.sidebar.info(f"Hosted demo: inputs are capped at {caps.max_chars} characters and training is switched off.")

nav.run()
