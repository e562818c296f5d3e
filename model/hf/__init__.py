"""Hugging Face checkpoint folders (MarianMT, GPT-2) read into this project's model and tokenizer interfaces."""
