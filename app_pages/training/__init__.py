"""The Training page: launch, watch and compare runs; heads forming over checkpoints."""
