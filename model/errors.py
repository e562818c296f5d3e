"""The error a checkpoint folder that cannot be loaded raises, in its own module so that both loaders (ours in
:mod:`model.checkpoint`, Hugging Face's in :mod:`model.hf.loader`) raise the same class without importing each
other."""


class CheckpointError(RuntimeError):
    """A checkpoint folder that cannot be loaded; the message says what is wrong, in plain words."""
