"""What a run is scored on and with: the splits, the outer folds, the metrics and link ranking (MRR)."""
