"""The Decoding lab: sampling rules, forced tokens, beam trees and the KV cache, step by step."""
