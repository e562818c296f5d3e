"""The smallest Streamlit app with a step button: what one click costs in Streamlit itself, on this machine.

:mod:`benchmarks.browser` times a click on it exactly as it times Translate's Next (the "floor" row): the
websocket round trip, a script run that does nothing, and React's redraw of two elements. No page of ours can
answer a click faster than this.
"""

import streamlit as st

state = st.session_state
state.setdefault("step", 0)


def _next() -> None:
    state["step"] += 1


st.button("Next", on_click=_next)
st.markdown(f"Step {state['step']} of 99")
