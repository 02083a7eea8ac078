"""dataset -> structure -> cache, in parallel over blocks of graphs.

Small graphs are packed into block-diagonal blocks of up to ``_BLOCK_NODES``
nodes: the powers and distances of a block-diagonal matrix are the blocks'
own, so one sparse product serves hundreds of molecules. Large graphs (more
than ``structure.large.min_nodes`` nodes) go alone, with the truncation rule.

Modules by job: ``compute`` (one block's structure), ``blocks`` (planning
blocks, worker processes), ``graphs`` (the cache file, its key and truncation
report), ``dataset`` (a registered dataset or an image grid -> cache).
"""
# The private names stay importable from here, where tests and callers have used them.
from xmask_cli.prepare.blocks import (  # noqa: F401
    _BLOCK_NODES,
    _PR_SET_PDEATHSIG,
    _die_with_parent,
    _run_block,
    _sigint_held,
    _stop_workers,
    _worker_init,
    iter_blocks,
    plan_blocks,
)
from xmask_cli.prepare.compute import BlockResult, col_dtype, compute_block
from xmask_cli.prepare.dataset import check_patch, grid_fingerprint, prepare_dataset, prepare_grid, resolve_cache_dir
from xmask_cli.prepare.graphs import (
    TRUNCATION_RULE,
    PrepareSummary,
    prepare_graphs,
    structure_params,
    truncation_report,
)

__all__ = [
    "BlockResult", "PrepareSummary", "TRUNCATION_RULE", "check_patch", "col_dtype", "compute_block", "grid_fingerprint",
    "iter_blocks", "plan_blocks", "prepare_dataset", "prepare_graphs", "prepare_grid", "resolve_cache_dir",
    "structure_params", "truncation_report",
]
