"""From a config to finished runs: the plan, the loaders, the experiment, the sweep, the dry run and its
estimate, run folders (folder.py), a run read back (evaluate) and runs compared."""
