"""``xmask tune``: hyper-parameter search on validation with Optuna.

``space`` reads a preset's ``tune:`` section (no optuna import); ``options``
holds how to search and ``narrow`` takes keys fixed by ``--set`` out of the
space; ``folder`` checks the study folder before any trial; ``storage`` opens
Optuna's storage with its heartbeat; ``identity`` makes a study refuse other
settings; ``pruning`` and ``search`` are the pruner and the loop; ``objective``
trains one trial through :func:`~xmask_cli.engine.runs.sweep.train_seeds`;
``study`` runs the search and the final seeds; ``outputs`` writes
``best.yaml``, ``trials.csv``, ``summary.json`` and the plots.
"""
