"""The pictures that are not about reading attention: the next-token choice and the beam tree, the KV cache,
attribution, training curves and the worked examples' teaching figures. Drawn from arrays and strings like
:mod:`viz`, whose theme and token labels they use (``charts`` may import ``viz``, never the reverse); no Streamlit,
no torch, no model."""
