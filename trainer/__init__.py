"""The trainer: its command line, the training loop, evaluations during training, resuming, the probe."""
