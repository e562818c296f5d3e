"""Runs started from the app: the launch form as data, processes and the one-run lock (no Streamlit)."""
