"""Scoring a translator: sacreBLEU metrics, the evaluation suite, `python -m evaluation.evaluate`."""
