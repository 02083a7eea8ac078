"""The training loop and what it runs on: fit, the optimiser and schedule, precision, the strategy (one
process or DDP), selection, checkpoints and resume, thread counts, the per-epoch watchers and curves."""
