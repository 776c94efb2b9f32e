"""Decoding: beam search over the model's cached decode step, and text-to-text translation."""
