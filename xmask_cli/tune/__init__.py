"""``xmask tune``: hyper-parameter search on validation with Optuna.

``space`` reads a preset's ``tune:`` section (no optuna import), ``objective``
trains one trial through :func:`~xmask_cli.engine.sweep.train_seeds`,
``study`` runs the search and the final seeds, ``outputs`` writes
``best.yaml``, ``trials.csv``, ``summary.json`` and the plots.
"""
