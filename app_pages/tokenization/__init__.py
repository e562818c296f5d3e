"""The Tokenization page: BPE merges replayed, splits compared."""
