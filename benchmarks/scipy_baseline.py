"""A per-graph scipy pipeline that computes what ``xmask prepare`` stores, and the check that it does.

The baseline of ``benchmarks/prepare.py``. For each graph, one at a time, with
plain scipy / numpy calls (no numba, no batching of graphs):

* ``Â = D^-1/2 (A+I) D^-1/2`` (edges symmetrised, self loops and repeats removed;
  ``D^-1/2`` as ``1 / sqrt(d)``, see :func:`_inv_sqrt`); ``Â^1..Â^K`` by whole
  sparse products on their union support. Graphs above ``large.min_nodes`` take
  the same truncation as the cache (``Â`` whole; for ``k >= 2`` the product with
  ``Â`` whose rows longer than ``large.fanout`` keep their diagonal and largest
  entries (:func:`cap`), then per row: diagonal and real edges kept, others below ``tau``
  dropped, the largest others up to ``topk`` per row, ties to the smaller
  column), written here as a vectorised numpy rule over the whole matrix, and
  the same dropped-mass shares (mat-vecs against exact row sums);
* hop distances up to ``spd.max_distance`` (``min(max_distance, large.spd_radius)``
  above ``large.min_nodes``) by ``scipy.sparse.csgraph.dijkstra(unweighted=True, limit=...)``;
* connected components (``csgraph.connected_components``);
* the normalized Laplacian's stored spectrum: every eigenpair up to
  ``spectrum.full_max_nodes`` nodes; above, each component's lowest ``m + 2``
  pairs (dense ``eigh`` up to 192 nodes, ARPACK shift-invert up to 5000, the top
  of ``2I - L`` above), then every zero pair and the ``m`` lowest non-zero ones,
  an eigenspace cut by the ``m``-th position left out whole.

:func:`check_equal` compares a baseline's outputs with a cache: the same
sections stored as computed and the same ``K``; graph by graph node and edge
counts, the large-graph flag, components as partitions, powers and distances
as sorted pair lists, spectra as eigenvalues and basis-free projectors
(``V V^T r`` per eigenvalue cluster on random ``r``); dropped-mass rows, mean
and max. It returns the list of differences (empty: equal), so the benchmark
can refuse to report a speed-up over a baseline that does other work;
:func:`unsupported` names the sections of a structure the baseline does not
compute (partitions, magnetic, RRWP), so the benchmark refuses those up front.
"""
from __future__ import annotations

import json
import warnings
from typing import Any

import numpy as np
import scipy.linalg
import scipy.sparse as sp
from scipy.sparse import csgraph
from scipy.sparse.linalg import eigsh

ZERO_TOL = 1e-6  # an eigenvalue at or below this is zero (one per component with edges)
TIE_TOL = 1e-6  # eigenvalues closer than this share an eigenspace: a cut never splits one
DENSE_EIG_MAX = 192  # components up to this size: dense eigh
SHIFT_INVERT_MAX = 5000  # up to this size ARPACK shift-invert, above: largest of 2I - L


# ----------------------------------------------------------------- one graph
def _adjacency(edge_index: np.ndarray, n: int) -> sp.csr_matrix:
    r, c = np.asarray(edge_index, dtype=np.int64).reshape(2, -1)
    keep = r != c
    r, c = r[keep], c[keep]
    a = sp.csr_matrix((np.ones(2 * len(r)), (np.concatenate([r, c]), np.concatenate([c, r]))), shape=(n, n))
    a.sum_duplicates()
    a.data[:] = 1.0
    return a


def _inv_sqrt(d: np.ndarray) -> np.ndarray:
    # 1 / sqrt(d), not d ** -0.5: the two differ in the last bit for some d, and on a large graph entries of Â^k
    # that are equal in exact arithmetic (many, on graphs of few distinct degrees) reach the top-k cut as ties,
    # which the rule settles by column only if they are equal in floating point too.
    out = np.zeros_like(d, dtype=np.float64)
    out[d > 0] = 1.0 / np.sqrt(d[d > 0])
    return out


def truncate(m: sp.csr_matrix, protect: sp.csr_matrix, tau: float, topk: int) -> sp.csr_matrix:
    """The cache's row rule on a whole matrix at once (numpy: one stable sort over the candidates).

    Protected: the diagonal and the support of ``protect``, found by looking each protected pair up among the
    matrix's sorted pairs (fewer lookups than the other way round). Candidates in rows over ``topk``, in
    (row, column) order, are sorted by row, then by decreasing value, stably: equal values keep the smaller
    column first.
    """
    m = m.tocsr()
    m.sort_indices()
    n = m.shape[0]
    rows = np.repeat(np.arange(n, dtype=np.int64), np.diff(m.indptr))
    vals = m.data
    key = rows * n + m.indices
    p = protect.tocsr()
    p.sort_indices()
    pkey = np.repeat(np.arange(n, dtype=np.int64), np.diff(p.indptr)) * n + p.indices
    prot = rows == m.indices
    if len(key):
        pos = np.minimum(np.searchsorted(key, pkey), len(key) - 1)
        prot[pos[key[pos] == pkey]] = True
    keep = prot | (np.abs(vals) >= tau) if tau > 0 else np.ones(len(vals), dtype=bool)
    if topk > 0:
        kept = np.bincount(rows[keep], minlength=n)
        nprot = np.bincount(rows[prot], minlength=n)
        c = np.flatnonzero(keep & ~prot & (kept > topk)[rows])
        order = c[np.lexsort((-np.abs(vals[c]), rows[c]))]
        r = rows[order]
        rank = np.arange(len(order)) - np.searchsorted(r, r)  # position inside the row
        keep[order[rank >= np.maximum(topk - nprot, 0)[r]]] = False
    indptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(rows[keep], minlength=n), out=indptr[1:])
    return sp.csr_matrix((vals[keep], m.indices[keep], indptr), shape=m.shape)


def cap(m: sp.csr_matrix, fanout: int) -> sp.csr_matrix:
    """The right-hand factor of the cache's products: a row of ``Â`` with more than ``fanout`` entries keeps its
    diagonal and then its largest entries (equal values: the smaller column), ``fanout`` in all; one stable sort
    over the long rows' entries."""
    m = m.tocsr()
    m.sort_indices()
    n = m.shape[0]
    counts = np.diff(m.indptr)
    if fanout <= 0 or not (counts > fanout).any():
        return m
    rows = np.repeat(np.arange(n, dtype=np.int64), counts)
    c = np.flatnonzero((counts > fanout)[rows])
    order = c[np.lexsort((-m.data[c], m.indices[c] != rows[c], rows[c]))]
    r = rows[order]
    keep = np.ones(m.nnz, dtype=bool)
    keep[order[np.arange(len(order)) - np.searchsorted(r, r) >= fanout]] = False
    out = sp.csr_matrix((m.data[keep], m.indices[keep], np.concatenate([[0], np.cumsum(keep)])[m.indptr]), shape=m.shape)
    return out


def _powers(a: sp.csr_matrix, k: int, large: bool, tau: float, topk: int,
            fanout: int = 0) -> tuple[list[sp.csr_matrix], np.ndarray | None]:
    n = a.shape[0]
    ai = (a + sp.identity(n, format="csr")).tocsr()
    d = _inv_sqrt(np.asarray(ai.sum(axis=1)).ravel())
    a_hat = (sp.diags(d) @ ai @ sp.diags(d)).tocsr()
    a_hat.sort_indices()
    right = cap(a_hat, fanout) if large else a_hat
    out = [a_hat]
    for _ in range(1, k):
        nxt = (out[-1] @ right).tocsr()
        out.append(truncate(nxt, a_hat, tau, topk) if large else nxt)
    dropped = None
    if large:
        dropped = np.zeros((n, k))
        v = np.ones(n)
        for j in range(k):
            v = a_hat @ v
            kept = np.asarray(out[j].sum(axis=1)).ravel()
            nz = v > 0
            dropped[nz, j] = 1.0 - kept[nz] / v[nz]
        dropped[np.abs(dropped) < 1e-12] = 0.0
        dropped = np.clip(dropped, 0.0, 1.0)
    return out, dropped


def _union(mats: list[sp.csr_matrix]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    n = mats[0].shape[0]
    pat = sum(sp.csr_matrix((np.ones(m.nnz), m.indices, m.indptr), shape=m.shape) for m in mats).tocsr()
    pat.sort_indices()
    row = np.repeat(np.arange(n), np.diff(pat.indptr))
    col = pat.indices.astype(np.int64)
    vals = np.zeros((len(row), len(mats)), dtype=np.float32)
    for j, m in enumerate(mats):
        coo = m.tocoo()
        vals[np.searchsorted(row * n + col, coo.row.astype(np.int64) * n + coo.col), j] = coo.data
    return row, col, vals


def _component_pairs(lap: sp.csr_matrix, idx: np.ndarray, want: int | None) -> tuple[np.ndarray, np.ndarray]:
    """Lowest ``want`` eigenpairs (all when None) of one component's Laplacian block."""
    sub = lap[idx][:, idx]
    s = len(idx)
    if want is None or s <= max(want, DENSE_EIG_MAX):
        subset = [0, want - 1] if want is not None and s > want else None
        return scipy.linalg.eigh(sub.toarray(), subset_by_index=subset, driver="evx" if subset else None,
                                 check_finite=False)
    v0 = np.cos(np.arange(s) * 0.7 + 0.1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if s <= SHIFT_INVERT_MAX:
            vals, vecs = eigsh(sub.tocsc(), k=want, sigma=-1e-3, which="LM", v0=v0, tol=1e-8)
        else:
            top, vecs = eigsh(2.0 * sp.identity(s, format="csr") - sub, k=want, which="LA", v0=v0, tol=1e-8,
                              maxiter=max(5000, 20 * s))
            vals = 2.0 - top
    o = np.argsort(vals)
    return vals[o], vecs[:, o]


def _spectrum(a: sp.csr_matrix, comp: np.ndarray, m: int, full_max: int) -> tuple[np.ndarray, np.ndarray]:
    n = a.shape[0]
    d = _inv_sqrt(np.asarray(a.sum(axis=1)).ravel())
    lap = (sp.identity(n, format="csr") - sp.diags(d) @ a @ sp.diags(d)).tocsr()
    if n <= full_max:
        return scipy.linalg.eigh(lap.toarray(), check_finite=False)
    lams, vecs = [], []
    for c in range(int(comp.max()) + 1):
        idx = np.flatnonzero(comp == c)
        lv, vv = _component_pairs(lap, idx, m + 2)
        full = np.zeros((n, len(lv)))
        full[idx] = vv
        lams.append(lv)
        vecs.append(full)
    lam, vec = np.concatenate(lams), np.concatenate(vecs, axis=1)
    zero = np.flatnonzero(lam <= ZERO_TOL)
    nz = np.flatnonzero(lam > ZERO_TOL)
    nz = nz[np.argsort(lam[nz], kind="stable")]
    if len(nz) > m:
        cut = m
        while cut > 0 and lam[nz[cut]] - lam[nz[cut - 1]] <= TIE_TOL:
            cut -= 1
        nz = nz[:cut]
    keep = np.concatenate([zero, nz])
    return lam[keep], vec[:, keep]


def baseline_graph(edge_index: np.ndarray, n: int, s: Any) -> dict[str, Any]:
    """Everything the cache stores for one graph, from ``s`` (a ``StructureSection``), by per-graph scipy calls."""
    a = _adjacency(edge_index, n)
    large = n > s.large.min_nodes
    out: dict[str, Any] = {"n": n, "edges": int(a.nnz // 2)}
    out["component"] = csgraph.connected_components(a, directed=False)[1]
    mats, dropped = _powers(a, s.powers.k, large, s.large.tau, s.large.topk, s.large.fanout)
    out["powers"] = _union(mats)
    out["dropped"] = dropped
    if s.spd.enabled:
        cut = min(s.spd.max_distance, s.large.spd_radius) if large else s.spd.max_distance
        dist = csgraph.dijkstra(a, directed=False, unweighted=True, limit=cut + 0.5)
        r, c = np.nonzero(np.isfinite(dist))
        out["spd"] = (r, c, dist[r, c].astype(np.uint8))
    if s.spectrum.enabled:
        out["spectrum"] = _spectrum(a, out["component"], s.spectrum.num_eigs, s.spectrum.full_max_nodes)
    return out


def baseline_all(edges: list[np.ndarray], num_nodes: np.ndarray, s: Any) -> list[dict[str, Any]]:
    """:func:`baseline_graph` for every graph, one after another."""
    return [baseline_graph(e, int(n), s) for e, n in zip(edges, num_nodes)]


def save(results: list[dict[str, Any]], path: str) -> None:
    """Write the outputs (uncompressed npz: what a per-graph pipeline would keep on disk)."""
    arrays: dict[str, np.ndarray] = {}
    for g, r in enumerate(results):
        arrays[f"{g}/component"] = r["component"]
        for name in ("powers", "spd", "spectrum"):
            if name in r:
                for i, arr in enumerate(r[name]):
                    arrays[f"{g}/{name}/{i}"] = arr
        if r["dropped"] is not None:
            arrays[f"{g}/dropped"] = r["dropped"]
    with open(path, "wb") as f:
        np.savez(f, **arrays)


# ----------------------------------------------------------------- the check
def _sorted_pairs(row: np.ndarray, col: np.ndarray, n: int, *vals: np.ndarray) -> tuple[np.ndarray, ...]:
    key = np.asarray(row, dtype=np.int64) * n + np.asarray(col, dtype=np.int64)
    o = np.argsort(key, kind="stable")
    return (key[o], *(v[o] for v in vals))


def _same_partition(a: np.ndarray, b: np.ndarray) -> bool:
    pairs = np.unique(np.stack([a, b]), axis=1)
    return len(np.unique(pairs[0])) == pairs.shape[1] == len(np.unique(pairs[1]))


def _projector_gap(lam_a: np.ndarray, va: np.ndarray, lam_b: np.ndarray, vb: np.ndarray, rng: np.random.Generator,
                   cluster_tol: float = 1e-4) -> float:
    """Largest difference of ``V_c V_c^T r`` over eigenvalue clusters ``c`` (basis-free), on 4 random ``r``."""
    r = rng.standard_normal((va.shape[0], 4))
    starts = np.concatenate([[0], np.flatnonzero(np.diff(lam_a) > cluster_tol) + 1, [len(lam_a)]])
    gap = 0.0
    for s, e in zip(starts[:-1], starts[1:]):
        pa = va[:, s:e] @ (va[:, s:e].T @ r)
        pb = vb[:, s:e] @ (vb[:, s:e].T @ r)
        gap = max(gap, float(np.abs(pa - pb).max(initial=0.0)))
    return gap


#: Cache groups of the sections the baseline computes, and of those it never does (``unsupported``).
SECTIONS = {"spd": "spd", "spectrum": "spectrum"}
OTHER_SECTIONS = {"magnetic": "magnetic", "rrwp": "rrwp", "partition": "nodes/part"}


def unsupported(s: Any, level: str) -> list[str]:
    """Sections of the structure ``s`` the baseline does not compute (empty: it computes all of ``s``)."""
    out = [name for name in ("magnetic", "rrwp") if getattr(s, name).enabled]
    if level == "node" and s.partition.parts > 0:
        out.append("partition")
    return out


def _sections_and_width(c: Any, results: list[dict[str, Any]]) -> list[str]:
    """What the cache stores beyond what the baseline computed, or the reverse: the two sides did other work."""
    problems = []
    for name, group in {**SECTIONS, **OTHER_SECTIONS}.items():
        cached, computed = c.has(group), any(name in r for r in results)
        if cached != computed:
            problems.append(f"section {name}: {'stored in the cache' if cached else 'absent from the cache'}, "
                            f"{'computed' if computed else 'not computed'} by the baseline")
    k = int(c.file["powers"].attrs["k"])
    widths = {r["powers"][2].shape[1] for r in results}
    if widths != {k}:
        problems.append(f"powers: the cache holds K = {k}, the baseline {sorted(widths)}")
    return problems


def _dropped_mass(c: Any, results: list[dict[str, Any]]) -> list[str]:
    """The cache's dropped-mass rows, mean and max per power against the baseline's truncated graphs."""
    shares = [r["dropped"] for r in results if r["dropped"] is not None]
    if "dropped_mass" not in c.file["powers"].attrs:
        return ["the cache records no dropped mass"] if shares else []
    dm = json.loads(c.file["powers"].attrs["dropped_mass"])
    cat = np.concatenate(shares) if shares else np.zeros((0, len(dm["mean"])))
    if dm["rows"] != len(cat):
        return [f"dropped mass over {dm['rows']} rows in the cache, {len(cat)} in the baseline"]
    if cat.shape[1] != len(dm["mean"]):
        return [f"dropped mass of {len(dm['mean'])} powers in the cache, {cat.shape[1]} in the baseline"]
    if not len(cat):
        return []
    if not np.allclose(cat.mean(axis=0), dm["mean"], rtol=1e-6, atol=1e-9) or \
            not np.allclose(cat.max(axis=0), dm["max"], rtol=1e-6, atol=1e-9):
        return [f"dropped mass differs: mean {cat.mean(axis=0).tolist()} max {cat.max(axis=0).tolist()} vs "
                f"{dm['mean']} {dm['max']}"]
    return []


def check_equal(results: list[dict[str, Any]], cache_path: str, *, rtol: float = 1e-5, atol: float = 1e-7,
                eig_tol: float = 1e-4, graphs: list[int] | None = None) -> list[str]:
    """Differences between the baseline's outputs and the cache at ``cache_path`` (empty list: the same).

    ``graphs``: which graphs to compare (default all). First the whole file: the same sections stored as
    computed (a section on one side only is a difference), the same ``K``, the dropped mass (rows, mean and
    max per power). Then per graph: node and edge counts, the large-graph flag, components as partitions,
    powers as float32 values on the same pairs; distances exactly; spectra by eigenvalue (``eig_tol``) and
    by projector per eigenvalue cluster (``eig_tol`` on ``V V^T r``, unit-variance ``r``), since a basis
    inside an eigenspace is free.
    """
    from xmask_cli.cache import StructureCache

    problems: list[str] = []
    rng = np.random.default_rng(0)
    with StructureCache(cache_path) as c:
        c.load_in_memory()
        if c.num_graphs != len(results):
            return [f"cache holds {c.num_graphs} graphs, baseline {len(results)}"]
        problems += _sections_and_width(c, results)
        problems += _dropped_mass(c, results)
        large = c.read_array("graphs/large")
        num_edges = c.read_array("graphs/num_edges")
        for g in (range(len(results)) if graphs is None else graphs):
            r, n = results[g], results[g]["n"]
            if c.num_nodes(g) != n:
                problems.append(f"graph {g}: {c.num_nodes(g)} nodes in the cache, {n} in the baseline")
                continue
            if int(num_edges[g]) != r["edges"]:
                problems.append(f"graph {g}: {int(num_edges[g])} edges in the cache, {r['edges']} in the baseline")
            if bool(large[g]) != (r["dropped"] is not None):
                problems.append(f"graph {g}: large-graph rule {'applied' if large[g] else 'not applied'} in the "
                                f"cache, {'applied' if r['dropped'] is not None else 'not applied'} in the baseline")
            if not _same_partition(c.component(g), r["component"]):
                problems.append(f"graph {g}: components differ")
            cr, cc, cv = c.powers(g)
            kc, vc = _sorted_pairs(cr, cc, n, cv)
            kb, vb = _sorted_pairs(*r["powers"][:2], n, r["powers"][2])
            if vc.shape[1:] != vb.shape[1:]:
                problems.append(f"graph {g}: {vc.shape[1]} powers cached, {vb.shape[1]} baseline")
            elif not np.array_equal(kc, kb):
                problems.append(f"graph {g}: powers on other pairs ({len(kc)} cached, {len(kb)} baseline)")
            elif not np.allclose(vc, vb, rtol=rtol, atol=atol):
                problems.append(f"graph {g}: power values differ by up to {np.abs(vc - vb).max():.2e}")
            if "spd" in r and c.has("spd"):  # a section on one side only is reported above
                sr, sc, sd = c.spd(g)
                kc, dc = _sorted_pairs(sr, sc, n, sd)
                kb, db = _sorted_pairs(r["spd"][0], r["spd"][1], n, r["spd"][2])
                if not (np.array_equal(kc, kb) and np.array_equal(dc.astype(np.int64), db.astype(np.int64))):
                    problems.append(f"graph {g}: distances differ ({len(kc)} cached pairs, {len(kb)} baseline)")
            if "spectrum" in r and c.has("spectrum"):
                lc, vc = c.spectrum(g)
                lb, vb = r["spectrum"]
                if len(lc) != len(lb) or not np.allclose(lc, lb, atol=eig_tol, rtol=0):
                    problems.append(f"graph {g}: eigenvalues differ ({len(lc)} cached, {len(lb)} baseline)")
                elif len(lc):
                    gap = _projector_gap(np.asarray(lc, np.float64), np.asarray(vc, np.float64), lb, vb, rng)
                    if gap > eig_tol * 10:
                        problems.append(f"graph {g}: eigenvectors span other spaces (projector gap {gap:.1e})")
    return problems
