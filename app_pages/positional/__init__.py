"""The Positional encoding page."""
