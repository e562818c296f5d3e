"""The reading room on the pages: attention vs attribution, the what-if, the logit lens (Streamlit renderers shared by
Translate and the Decoding lab).
"""
