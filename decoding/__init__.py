"""Decoding: the KV-cache stepper, sampling, beam search, batched greedy, finished decodings."""
