"""The Worked examples page: scaled dot-product attention with numbers, and its live mode."""
