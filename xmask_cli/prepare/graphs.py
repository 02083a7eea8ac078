"""Graphs -> structure cache file: the cache key's parameters, the writing loop and the truncation report."""
from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, cast

import numpy as np

from xmask_cli.cache import CacheWriter, StructureCache, cache_key, cache_path, verify
from xmask_cli.cache.files import cache_json
from xmask_cli.config import StructureSection
from xmask_cli.errors import CacheError, first_line
from xmask_cli.fs import ensure_writable_dir
from xmask_cli.prepare.blocks import DEFAULT_BUDGET, deferred_interrupt, iter_blocks
from xmask_cli.prepare.edge_section import EdgeInputs, write_edge_section
from xmask_cli.prepare.ranks import RankWorld, gathered_blocks
from xmask_cli.prepare.subset import derive, find_superset


def structure_params(cfg: StructureSection, level: str, edges: EdgeInputs | None = None) -> dict[str, Any]:
    """The parameters that decide the cache's content (part of its key).

    Disabled sections and settings that prepare does not read (``eps``) are
    left out, so that toggling them does not invalidate a cache. ``edge`` is
    there only when the file stores edge attributes (``edges`` given and
    ``structure.edge`` on): their coding and digest (:meth:`EdgeInputs.params`).
    """
    d = asdict(cfg)
    d["powers"].pop("eps", None)
    for sec in ("spd", "spectrum", "magnetic", "rrwp"):
        if not d[sec]["enabled"]:
            d[sec] = {"enabled": False}
    del d["edge"]  # absent, not off, without attributes: the keys of files without them stay what they were
    if edges is not None and cfg.edge.enabled:
        d["edge"] = {"enabled": True, **edges.params()}
    if cfg.partition.parts <= 0 or level != "node":
        d["partition"] = {"parts": 0}
    return d


class _DroppedMass:
    """Running mean and max over rows of the truncated share of each power's row mass."""

    def __init__(self) -> None:
        self.rows: dict[str, int] = {}
        self.total: dict[str, np.ndarray] = {}
        self.max: dict[str, np.ndarray] = {}
        self.pending: dict[str, list[np.ndarray]] = {}

    def add(self, group: str, share: np.ndarray, complete: bool = True) -> None:
        """Add the shares of a block of graphs; ``complete=False``: rows of a large graph, held until
        :meth:`flush` (so the sums run over the whole graph at once, whatever its row blocks)."""
        if not complete:
            self.pending.setdefault(group, []).append(share)
            return
        self._add(group, share)

    def flush(self) -> None:
        """Add the held rows of the large graph just completed."""
        for group, parts in self.pending.items():
            self._add(group, np.concatenate(parts))
        self.pending = {}

    def _add(self, group: str, share: np.ndarray) -> None:
        if group not in self.rows:
            self.rows[group], self.total[group], self.max[group] = 0, np.zeros(share.shape[1]), np.zeros(share.shape[1])
        self.rows[group] += share.shape[0]
        self.total[group] += share.sum(axis=0)
        self.max[group] = np.maximum(self.max[group], share.max(axis=0, initial=0.0))

    def attrs(self, group: str, width: int) -> str:
        """JSON for the group's ``dropped_mass`` attribute (zeros when no graph was truncated)."""
        rows = self.rows.get(group, 0)
        mean = self.total[group] / rows if rows else np.zeros(width)
        mx = self.max[group] if rows else np.zeros(width)
        return json.dumps({"rows": rows, "mean": [float(x) for x in mean], "max": [float(x) for x in mx]})


#: Root attribute: how many repeated edge rows of a user's file were merged (absent when none were).
MERGED_ATTR = "merged_edge_rows"

#: The truncation rule as recorded in the cache (see :class:`~xmask_cli.structure.powers.Truncation`).
TRUNCATION_RULE = ("large graphs only; power 1 (A-hat) kept whole; for k >= 2, P_k = trunc(P_(k-1) cap(A-hat)): "
                   "cap keeps every row of A-hat with at most fanout entries whole and cuts a longer one (a hub's) "
                   "to its diagonal and its fanout - 1 largest entries (the neighbours of smallest degree, ties to "
                   "the smaller id); trunc keeps the diagonal and every real edge (support of A + I), drops other "
                   "entries with |x| < tau, then a row keeps its protected entries and the largest others up to "
                   "topk entries in total")


def truncation_report(cache: StructureCache) -> dict[str, Any]:
    """What truncation did to a cache's large graphs, read from its attributes.

    ``{"large_graphs", "tau", "topk", "fanout", "capped_rows", "rule", "powers": {"k", "rows", "mean", "max"}[,
    "rrwp": {"step", ...}]}``: per power, the mean and max over the truncated graphs' rows of the share of the
    row's exact mass that the stored entries miss (0 where nothing was truncated); ``capped_rows``: the hub rows
    the fan-out cap cut (a file written before the cap existed reads as fanout 0).
    """
    f = cache.file
    dropped = {g: f[g].attrs["dropped_mass"] for g in ("powers", "rrwp") if g in f and "dropped_mass" in f[g].attrs}
    return _truncation_report(int(np.count_nonzero(cache.read_array("graphs/large"))), f["powers"].attrs["truncation"],
                              dropped)


def _truncation_report(large_graphs: int, truncation: str, dropped_mass: dict[str, str]) -> dict[str, Any]:
    """:func:`truncation_report` from the values written: the ``truncation`` and ``dropped_mass`` JSON attributes."""
    trunc = cache_json(truncation, "the cache", "powers/truncation")
    out: dict[str, Any] = {"large_graphs": large_graphs, "tau": trunc["tau"], "topk": trunc["topk"],
                           "fanout": int(trunc.get("fanout", 0)), "capped_rows": int(trunc.get("capped_rows", 0)),
                           "rule": trunc["rule"]}
    for group, label, first in (("powers", "k", 1), ("rrwp", "step", 0)):
        if group in dropped_mass:
            d = cache_json(dropped_mass[group], "the cache", f"{group}/dropped_mass")
            out[group] = {label: list(range(first, first + len(d["mean"]))), **d}
    return out


def _append_pairs(w: CacheWriter, r: Any, ptrs: dict[str, int]) -> None:
    """Append a result's pair groups (CSR rows continuing ``ptrs``, the running pair count per group)."""
    for group, arrs in r.pairs.items():
        if group not in ptrs:
            ptrs[group] = 0
            w.append(f"{group}/indptr", np.zeros(1, dtype=np.int64))
        w.append(f"{group}/indptr", ptrs[group] + np.cumsum(arrs["node_counts"]))
        ptrs[group] += int(arrs["node_counts"].sum())
        for k, v in arrs.items():
            if k != "node_counts":
                w.append(f"{group}/{k}", v)


@dataclass
class PrepareSummary:
    """What ``xmask prepare`` reports."""

    dataset: str
    path: str
    key: str
    cached: bool
    graphs: int
    nodes: int
    edges: int
    size_bytes: int
    seconds: float
    params: dict[str, Any]
    truncation: dict[str, Any] = field(default_factory=dict)  # see :func:`truncation_report`
    #: Node features training will feed the model (``GraphSet.feature_info``); None where not loaded here.
    features: dict[str, Any] | None = None
    #: The cache file holding more that this one was copied out of (nothing recomputed); None if computed.
    served_from: str | None = None
    #: Repeated ``(src, dst)`` rows of a user's edges file merged into their first listing (the cache's
    #: root attribute ``merged_edge_rows``; 0 where none were, or for a registry dataset).
    merged_edge_rows: int = 0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def prepare_graphs(
    *,
    dataset_key: str,
    level: str,
    edges: list[np.ndarray],
    num_nodes: np.ndarray,
    fingerprint: str,
    cfg: StructureSection,
    cache_dir: Path,
    workers: int = 1,
    force: bool = False,
    full_check: bool = False,
    progress: Callable[[int, int], None] | None = None,
    log: Callable[[str], None] | None = None,
    memory_gb: float | None = None,
    world: Any = None,
    source_folder: str | None = None,
    merged_edge_rows: int = 0,
    edge_attr: EdgeInputs | None = None,
) -> PrepareSummary:
    """Compute and cache the structure of ``edges`` unless the same key is cached and sound.

    Args:
        dataset_key: folder name under the cache dir (lower-case dataset name).
        level: task level (``node`` enables partitions).
        edges, num_nodes: the graphs, graph-local ids.
        fingerprint: hash of the input graphs (see :func:`graphs_fingerprint`).
        cfg: structure section of the config.
        force: rebuild even a sound file.
        full_check: read every chunk of an existing file (checksums) before trusting it, not only
            its attributes and offsets.
        progress: called with ``(graphs_done, graphs_total)``.
        memory_gb: working-set budget of a large graph's row blocks (``prepare.memory_gb``); no value depends on it.
        source_folder: the real absolute path of the user's dataset folder the graphs were read from
            (:func:`~xmask_cli.data.folder.source_folder`), recorded in the root attribute ``source_folder``
            for ``cache verify --check-inputs``; not part of the key (a copy of the folder elsewhere is the same input).
        merged_edge_rows: repeated edge rows the folder's reader merged (``GraphSet.merged_edge_rows``),
            recorded in the root attribute ``merged_edge_rows`` when above 0. Not part of the key: the
            fingerprint of the merged graph (and, for a folder, of its files) already is.
        edge_attr: the loader's edge attributes (:func:`~xmask_cli.prepare.edge_section.edge_inputs`), stored as
            the ``edge`` section when ``cfg.edge`` is on; their coding and digest join the key's parameters.

    With ``world`` (a :class:`~xmask_cli.prepare.ranks.RankWorld` of several ranks, every rank calling)
    the ranks share the computation (see :mod:`~xmask_cli.prepare.ranks`): rank 0 checks, writes and
    reports; every rank returns its summary. Without it this process computes alone, process group or
    not (training under torchrun prepares on rank 0 while the others wait).

    Raises:
        CacheError: something other than a regular file sits at the cache path.
    """
    w = world if world is not None else RankWorld()
    budget = DEFAULT_BUDGET if memory_gb is None else float(memory_gb) * (1 << 30)
    nn = np.asarray(num_nodes, dtype=np.int64)
    if w.distributed and w.rank != 0:
        if w.broadcast(None) == "compute":
            for _ in gathered_blocks(edges, nn, cfg, level, w, budget_bytes=budget):
                pass
        return cast(PrepareSummary, w.broadcast(None))
    said: list[str] = []

    def announce(what: str) -> None:
        """Tell the other ranks whether they compute (once)."""
        if w.distributed and not said:
            said.append(what)
            w.broadcast(what)

    def blocks(check: Callable[[], None]) -> Any:
        announce("compute")
        if w.distributed:
            return gathered_blocks(edges, nn, cfg, level, w, check, budget_bytes=budget)
        return iter_blocks(edges, nn, cfg, level, workers, check, budget_bytes=budget)

    summary = _prepare_graphs(dataset_key=dataset_key, level=level, edge_list=edges, num_nodes=num_nodes,
                              fingerprint=fingerprint, cfg=cfg, cache_dir=cache_dir, force=force,
                              full_check=full_check, progress=progress, log=log, blocks=blocks,
                              source_folder=source_folder, merged_edge_rows=merged_edge_rows, edges=edge_attr)
    announce("done")
    if w.distributed:
        w.broadcast(summary)
    return summary


def _prepare_graphs(*, dataset_key: str, level: str, edge_list: list[np.ndarray], num_nodes: np.ndarray,
                    fingerprint: str, cfg: StructureSection, cache_dir: Path, force: bool, full_check: bool,
                    progress: Callable[[int, int], None] | None, log: Callable[[str], None] | None,
                    blocks: Callable[[Callable[[], None]], Any], source_folder: str | None = None,
                    merged_edge_rows: int = 0, edges: EdgeInputs | None = None) -> PrepareSummary:
    """:func:`prepare_graphs` in the process that writes; ``blocks(check)`` yields the computed units.

    In order: an existing file that checks out is kept, a superset cache serves a derived file, else
    every block is computed and written.
    """
    t0 = time.perf_counter()
    edges = edges if cfg.edge.enabled else None  # without them given, the file holds no edge section
    params = structure_params(cfg, level, edges)
    key = cache_key(fingerprint, params)
    path = cache_path(cache_dir, dataset_key, key)
    nn = np.asarray(num_nodes, dtype=np.int64)

    def summary(cached: bool, edges_total: int, report: dict[str, Any], **extra: Any) -> PrepareSummary:
        return PrepareSummary(dataset_key, str(path), key, cached, len(nn), int(nn.sum()), edges_total,
                              path.stat().st_size, round(time.perf_counter() - t0, 3), params, report, **extra)

    _refuse_foreign_path(path)
    if path.exists() and not force:
        kept = _existing_cache(path, fingerprint, dataset_key, full_check, log)
        if kept is not None:
            edges_total, report, merged = kept
            return summary(True, edges_total, report, merged_edge_rows=merged)
    ensure_writable_dir(path.parent)
    attrs: dict[str, Any] = {"key": key, "dataset": dataset_key, "level": level, "fingerprint": fingerprint,
                             "params": json.dumps(params, sort_keys=True)}
    if source_folder is not None:
        attrs["source_folder"] = str(source_folder)
    if merged_edge_rows:
        attrs[MERGED_ATTR] = int(merged_edge_rows)
    src = None if force else find_superset(path.parent, fingerprint, params, exclude=path)
    if src is not None:
        derive(src, path, attrs, params, log)
        with StructureCache(path) as c:
            edges_total = int(c.read_array("graphs/num_edges").sum())
            report = truncation_report(c)
        return summary(False, edges_total, report, served_from=str(src), merged_edge_rows=int(merged_edge_rows))
    total_edges, report = _write_blocks(path, attrs, cfg, blocks, progress, len(nn), _edge_job(edge_list, nn, edges))
    return summary(False, total_edges, report, merged_edge_rows=int(merged_edge_rows))


def _edge_job(edge_list: list[np.ndarray], nn: np.ndarray,
              edges: EdgeInputs | None) -> Callable[[CacheWriter], None] | None:
    """What writes the edge section after the blocks (None without edge attributes)."""
    if edges is None:
        return None
    return lambda w: write_edge_section(w, edge_list, nn, edges)


def _refuse_foreign_path(path: Path) -> None:
    """Refuse a cache path that holds something xmask did not write (a folder, a link).

    Such a path is never deleted, and no temp file is written for nothing.
    """
    if path.is_symlink() or (path.exists() and not path.is_file()):
        raise CacheError(f"cache path {path} is not a regular file (a {'link' if path.is_symlink() else 'folder'} "
                         f"is in the way); move it away, or use another --cache-dir")


def _existing_cache(path: Path, fingerprint: str, dataset_key: str, full_check: bool,
                    log: Callable[[str], None] | None) -> tuple[int, dict[str, Any], int] | None:
    """``(edges, truncation report, merged edge rows)`` of an existing file that checks out, else ``None``.

    An existing file is trusted only once it checks out: its key, fingerprint, dataset and format
    (cheap), and with ``full_check`` every chunk's checksum too. An unusable one is logged (and rebuilt).
    """
    problems = verify(path, fingerprint, full=full_check, expected_dataset=dataset_key)
    if not problems:
        try:
            with StructureCache(path) as c:
                edges_total = int(c.read_array("graphs/num_edges").sum())
                report = truncation_report(c)
                merged = int(c.file.attrs.get(MERGED_ATTR, 0))
            return edges_total, report, merged
        except (CacheError, OSError, KeyError, ValueError, RuntimeError) as exc:
            problems = [first_line(exc)]
    if log is not None:
        log(f"existing cache {path} is unusable ({problems[0]}); rebuilding it")
    return None


class _BlockAppender:
    """Appends computed blocks to a cache file: the running offsets and counts the file's pointers need."""

    def __init__(self, w: CacheWriter) -> None:
        self.w = w
        self.ptrs: dict[str, int] = {}
        self.vptr: dict[str, list[int]] = {}
        self.comp_offset = 0
        self.node_total = 0
        self.total_edges = 0
        self.large_graphs = 0
        self.capped = 0
        self.dropped = _DroppedMass()
        w.append("graphs/node_ptr", np.zeros(1, dtype=np.int64))

    def add(self, r: Any) -> None:
        """One block: the rows of a large graph (pairs only), or whole graphs."""
        w = self.w
        for group, share in r.dropped.items():
            self.dropped.add(group, share, r.complete)
        if not r.complete:  # rows of a large graph: pairs only
            _append_pairs(w, r, self.ptrs)
            # Large slabs already: hand them over now, so that the writer works while the next block is computed.
            w.flush()
            return
        self.dropped.flush()
        w.append("graphs/num_nodes", r.num_nodes)
        w.append("graphs/num_edges", r.num_edges)
        w.append("graphs/large", r.large)
        self.large_graphs += int(np.count_nonzero(r.large))
        self.capped += int(r.capped)
        w.append("graphs/node_ptr", self.node_total + np.cumsum(r.num_nodes))
        self.node_total += int(r.num_nodes.sum())
        self.total_edges += int(r.num_edges.sum())
        w.append("nodes/component", r.component + self.comp_offset)
        self.comp_offset += int(r.component.max()) + 1 if r.component.size else 0
        if r.part is not None:
            w.append("nodes/part", r.part)
        _append_pairs(w, r, self.ptrs)
        for group, e in r.eig.items():
            self._add_eigenpairs(group, e)

    def _add_eigenpairs(self, group: str, e: dict[str, Any]) -> None:
        """One block's eigenvalues and eigenvectors of ``group``, with their pointers."""
        w, vptr = self.w, self.vptr
        if group not in vptr:
            vptr[group] = [0, 0]
            w.append(f"{group}/val_ptr", np.zeros(1, dtype=np.int64))
            w.append(f"{group}/vec_ptr", np.zeros(1, dtype=np.int64))
        w.append(f"{group}/val_ptr", vptr[group][0] + np.cumsum([v.shape[0] for v in e["vals"]]))
        w.append(f"{group}/vec_ptr", vptr[group][1] + np.cumsum([v.shape[0] for v in e["vecs"]]))
        vptr[group][0] += sum(v.shape[0] for v in e["vals"])
        vptr[group][1] += sum(v.shape[0] for v in e["vecs"])
        w.append(f"{group}/eigvals", np.concatenate(e["vals"]) if e["vals"] else np.zeros(0))
        w.append(f"{group}/eigvecs", np.concatenate(e["vecs"]))
        w.append(f"{group}/method", np.asarray(e["methods"], dtype="S16"))


def _write_blocks(path: Path, attrs: dict[str, Any], cfg: StructureSection,
                  blocks: Callable[[Callable[[], None]], Any], progress: Callable[[int, int], None] | None,
                  num_graphs: int, extra: Callable[[CacheWriter], None] | None = None) -> tuple[int, dict[str, Any]]:
    """Compute and write every block to ``path``, then ``extra(writer)`` (the edge section);
    ``(total edges, truncation report)``."""
    # Ctrl-C is raised only between blocks (see deferred_interrupt): never inside numba, LLVM or HDF5.
    with deferred_interrupt() as check, CacheWriter(path, attrs) as w:
        out = _BlockAppender(w)
        for done, r in blocks(check):
            out.add(r)
            if r.complete and progress is not None:
                progress(done, num_graphs)
        if extra is not None:
            extra(w)
        check()  # a Ctrl-C during the last block still stops before the file is marked complete
        truncation = json.dumps({"tau": cfg.large.tau, "topk": cfg.large.topk, "fanout": cfg.large.fanout,
                                 "capped_rows": out.capped, "applies_to": "graphs/large", "rule": TRUNCATION_RULE})
        masses = {"powers": out.dropped.attrs("powers", cfg.powers.k)}
        w.set_attrs("powers", k=cfg.powers.k, normalization=cfg.powers.normalization, truncation=truncation,
                    dropped_mass=masses["powers"])
        if cfg.rrwp.enabled:
            masses["rrwp"] = out.dropped.attrs("rrwp", cfg.rrwp.steps + 1)
            w.set_attrs("rrwp", dropped_mass=masses["rrwp"])
        if cfg.spd.enabled:
            w.set_attrs("spd", max_distance=cfg.spd.max_distance, large_radius=min(cfg.spd.max_distance, cfg.large.spd_radius))
    # From the values just written: no second open of the file.
    return out.total_edges, _truncation_report(out.large_graphs, truncation, masses)

