"""Translate's step view stepped entirely in the browser: the measured alternative to a server round trip per click.

Every step's view (the ten most probable tokens, the tokens so far, the new token's cross-attention and the
alignment, for the layer shown) is rendered once on the server and sent in one HTML element (``st.html`` with
its script); its own Next and
Back buttons show another step's view without asking the server. :mod:`benchmarks.stepping` times a click on it
beside a click on the real Translate page. The product keeps the round trip (docs/benchmarks.md, "Stepping in the
browser"): this file only exists to measure the alternative.
"""

import html

import streamlit as st

from charts.next_token import top_tokens_html
from decoding.decoded import StepView
from serving import heavy
from ui import checkpoints, pieces, state
from viz.attention import alignment_html, highlight_tokens_html, tokens_html

heavy.configure_torch()
folder = checkpoints.available_checkpoints()[checkpoints.DEFAULT_CHECKPOINT]
st.session_state["app_ckpt_path"] = folder
ckpt = checkpoints.require_checkpoint()
tok, cfg = ckpt.tokenizer, ckpt.config
text = st.query_params.get("text", state.PRESETS[0])
src = state.source_for(ckpt, text)
if src is None:
    st.stop()
run = state.greedy_run(ckpt, src)
layer = cfg.n_decoder_layers - 1
source = pieces.shown(tok, src.tokens)


def step_html(step: int) -> str:
    """One step's view, as Translate draws it for the mean over the heads of the last decoder layer."""
    view = StepView.of(run, step)
    head = f'<p class="status"><b>Step {step} of {len(run.records)}</b></p>'
    if step == 0:
        return head + tokens_html(source)
    record = view.records[-1]
    cross, matrix = record.cross_attention, view.cross_attention_matrix()
    if cross is None or matrix is None:
        raise ValueError("this benchmark steps an encoder-decoder checkpoint: the model has no cross-attention")
    ids, probs = record.top(10)
    chosen = ids.index(record.token_id) if record.token_id in ids else None
    return (
        head
        + top_tokens_html(
            pieces.of_ids(tok, ids), probs, chosen, title=f"Step {step}: the 10 most probable next tokens"
        )
        + tokens_html(pieces.of_ids(tok, view.generated), current=step - 1)
        + highlight_tokens_html(source, cross[layer].mean(0))
        + alignment_html(matrix[layer].mean(0), pieces.of_ids(tok, view.generated), source)
    )


steps = [step_html(k) for k in range(len(run.records) + 1)]
divs = "".join(
    f'<div class="ae-step" data-step="{k}" style="display:{"block" if k == 0 else "none"}">{body}</div>'
    for k, body in enumerate(steps)
)
page = f"""
<div style="font-family:sans-serif">
  <button id="ae-back">Back</button> <button id="ae-next">Next</button>
  {divs}
</div>
<script>
  let step = 0; const views = document.querySelectorAll('.ae-step');
  function show(k) {{ views[step].style.display = 'none'; step = k; views[step].style.display = 'block'; }}
  document.getElementById('ae-next').onclick = () => show(Math.min(step + 1, views.length - 1));
  document.getElementById('ae-back').onclick = () => show(Math.max(step - 1, 0));
</script>
"""
st.title("Translate, stepped in the browser")
st.markdown(f"{html.escape(text)} → **{html.escape(tok.decode(run.output_ids()))}**")
st.html(page, unsafe_allow_javascript=True)  # in the page itself, no iframe
st.caption(f"{len(steps)} views sent at once: {sum(len(s) for s in steps):,} characters of HTML.")
