"""The component ablation (paper 000, Table 7) as one call: variants x seeds (x outer folds) -> a table.

:mod:`~xmask_cli.ablate.variants` names the variants and the overrides that make each from the base
config; :mod:`~xmask_cli.ablate.run` trains them through ``xmask train``'s sweep (finished runs read back,
killed ones resumed); :mod:`~xmask_cli.ablate.table` makes the table: each variant's mean ± std over its
runs and its difference from ``full``, of the means and run by run on the same splits.

Example::

    result = run_ablation("proteins", [], seeds=[0], folds=10, out_dir=Path("ablations/proteins"),
                          cache_dir=Path("cache"))
    for row in result.rows[1:]:
        print(row.variant, row.test_mean, row.paired.mean, row.paired.above, row.paired.below)
"""
from __future__ import annotations

from xmask_cli.ablate.run import run_ablation
from xmask_cli.ablate.table import paired_delta, with_deltas
from xmask_cli.ablate.variants import (
    BIAS_VARIANTS,
    CORE_VARIANTS,
    EXPERT_VARIANTS,
    IMAGE_VARIANTS,
    VARIANTS,
    default_variants,
    parse_names,
    parse_variants,
    variant_overrides,
)

__all__ = ["VARIANTS", "CORE_VARIANTS", "BIAS_VARIANTS", "EXPERT_VARIANTS", "IMAGE_VARIANTS", "default_variants",
           "variant_overrides", "parse_variants", "parse_names", "run_ablation", "paired_delta", "with_deltas"]
