"""Pure numpy/scipy structure math: normalized powers, SPD, spectra, partitions.

No torch.nn and no h5py here; the cache and the engine build on these.
"""
from xmask_cli.structure.csr_kernels import union_rows
from xmask_cli.structure.graph import adjacency, connected_components
from xmask_cli.structure.partition import metis_parts
from xmask_cli.structure.powers import (
    Truncation,
    adjacency_powers,
    ball_structure,
    cap_rows,
    capped_rows,
    dropped_share,
    normalized_adjacency,
    power_pairs,
    power_row_sums,
    random_walk_powers,
    random_walk_row_sums,
    truncate_rows,
    union_pairs,
    walk_pairs,
)
from xmask_cli.structure.spd import BEYOND, UNREACHABLE, PairDistances, pair_distance, shortest_path_pairs
from xmask_cli.structure.spectrum import (
    DENSE_MAX,
    TIE_TOL,
    ZERO_TOL,
    block_eigenpairs,
    graph_spectra,
    lowest_eigenpairs,
    magnetic_laplacian,
    normalized_laplacian,
)

__all__ = [
    "DENSE_MAX",
    "TIE_TOL",
    "ZERO_TOL",
    "BEYOND",
    "UNREACHABLE",
    "Truncation",
    "adjacency",
    "adjacency_powers",
    "ball_structure",
    "cap_rows",
    "capped_rows",
    "dropped_share",
    "block_eigenpairs",
    "connected_components",
    "graph_spectra",
    "lowest_eigenpairs",
    "magnetic_laplacian",
    "metis_parts",
    "normalized_adjacency",
    "normalized_laplacian",
    "pair_distance",
    "PairDistances",
    "power_pairs",
    "power_row_sums",
    "random_walk_powers",
    "random_walk_row_sums",
    "shortest_path_pairs",
    "truncate_rows",
    "union_pairs",
    "union_rows",
    "walk_pairs",
]
