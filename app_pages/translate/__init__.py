"""The Translate page: a sentence decoded step by step, its attention and what moved each token."""
