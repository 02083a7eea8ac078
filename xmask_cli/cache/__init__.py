"""The HDF5 structure cache: key, atomic write, lazy reads, verify, list, clear.

One file per (input graphs, structure parameters, format version) at
``<cache_dir>/<dataset>/<key>.h5``. Layout (format version 3), every array
chunked and fletcher32-checksummed, and LZF-compressed except the eigenvalues and
eigenvectors (dense floats that hardly compress)::

    /                     attrs: format_version, key, dataset, level, fingerprint,
                                 params (JSON), created, versions (JSON), complete,
                                 source_folder (a user's dataset folder only: its real absolute path)
    /graphs/num_nodes     int64 [G]        node count per graph
    /graphs/node_ptr      int64 [G+1]      offsets of each graph's nodes in /nodes/*
    /graphs/num_edges     int64 [G]        undirected edges per graph (no self loops)
    /graphs/large         bool  [G]        True: truncation rule and SPD radius applied
    /nodes/component      int32 [N]        connected-component id (equal ids: mutually reachable)
    /nodes/part           int32 [N]        METIS part of each node (only with partitions)
    /powers/indptr        int64 [N+1]      CSR over all nodes: node i's pairs are indptr[i]:indptr[i+1]
    /powers/col           uint16 [P]       graph-local column of each pair (int32 if a graph has > 65536 nodes)
    /powers/values        float32 [P, K]   column j = Â^(j+1) at each pair (0 where absent)
    /powers               attrs: k, normalization, truncation (JSON: tau, topk, rule),
                                 dropped_mass (JSON: rows, mean[K], max[K]: share of each
                                 truncated row's exact Â^k mass the stored entries miss)
    /spd/{indptr,col}     pairs at distance <= max_distance (<= spd_radius if large)
    /spd/dist             uint8 [S]
    /rrwp/{indptr,col}    pairs of the union support of I, P, ..., P^steps
    /rrwp/values          float32 [R, steps+1]    (attrs: dropped_mass, as /powers, for I..P^steps)
    /spectrum/{val_ptr,vec_ptr}   int64 [G+1] offsets into eigvals / flat eigvecs
    /spectrum/eigvals     float64 [sum m_g]      per graph ascending: every zero pair (one per component),
                                                 then the lowest non-zero ones (structure.graph_spectra)
    /spectrum/eigvecs     float32 [sum n_g*m_g]  row-major [n_g, m_g] per graph
    /magnetic/...         as /spectrum, eigvecs complex64
    /edge/{indptr,col}    pairs (i, j) an edge joins (no self pairs; see structure.edge_attrs for which edge)
    /edge/attr            [S, C] that edge's attributes: uint8/uint16/int32 codes (encoding index) or float32
                          (linear); attrs: encoding, dims (per column vocabulary, or the column count)

Graph ``g``'s pairs are ``indptr[node_ptr[g]] : indptr[node_ptr[g+1]]``, one
contiguous read (the PyG ``slices`` idea); the row of a pair is implied by
``indptr``, so only columns are stored. A pair missing from
``/spd`` is farther than the cut-off when both nodes share a component, and
unreachable otherwise.

Modules: :mod:`~xmask_cli.cache.files` (format version, key, path, temp names),
:mod:`~xmask_cli.cache.writer` (:class:`CacheWriter`), :mod:`~xmask_cli.cache.reader`
(:class:`StructureCache`), :mod:`~xmask_cli.cache.manage` (list, verify, clear),
:mod:`~xmask_cli.cache.inputs` (the input a file was built from, read again for ``verify --check-inputs``).
Everything public is importable from ``xmask_cli.cache``.
"""
from xmask_cli.cache.files import FORMAT_VERSION, cache_key, cache_path, is_stale_temp
from xmask_cli.cache.inputs import SOURCE_ATTR, InputFingerprints
from xmask_cli.cache.manage import (
                                    CacheInfo,
                                    cache_files,
                                    clear,
                                    dataset_folder,
                                    info,
                                    is_own_cache_file,
                                    listing,
                                    verify,
)
from xmask_cli.cache.reader import StructureCache
from xmask_cli.cache.writer import CacheWriter

__all__ = ["FORMAT_VERSION", "SOURCE_ATTR", "CacheInfo", "CacheWriter", "InputFingerprints", "StructureCache",
           "cache_files", "cache_key", "cache_path", "clear", "dataset_folder", "info", "is_own_cache_file", "is_stale_temp", "listing", "verify"]
