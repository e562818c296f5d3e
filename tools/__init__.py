"""Tools around runs: the GPU lease's timed leg and its size, vocabulary choice, back-translation, averaging and
growing checkpoints, carrying a card.
"""
