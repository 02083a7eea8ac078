"""A cache file holding more serves a preset that needs less: find it, and copy out what the preset reads.

A file covers a request when it was built from the same graphs (fingerprint) with the same normalization and
large-graph rule, at least the requested ``K``, and every requested section with the same parameters. The first
``K'`` powers of a ``K``-file are the ``K'``-file's own (each power is computed from the one before it, and the
truncation rule is row-wise), so the pairs of ``Â^1..Â^K'`` are the stored pairs where one of those columns is
non-zero, in the stored order: on exact graphs the breadth-first ball of radius ``K'`` is a prefix of the ball of
radius ``K``; on large graphs pairs are sorted by ``(row, col)``. Stored entries are positive (``Â ≥ 0`` with a
positive diagonal; truncation keeps only entries ``≥ tau`` besides the real edges), so "non-zero" is exactly
"in the support". Copying is a streamed pass over the file: no structure is recomputed.
"""
from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import h5py
import numpy as np

from xmask_cli.cache import CacheWriter, verify
from xmask_cli.cache.files import H5_ERRORS, cache_json
from xmask_cli.errors import CacheError

__all__ = ["covers", "derive", "find_superset"]

_SECTIONS = ("spd", "spectrum", "magnetic", "rrwp", "edge")
# Pairs copied per step: bounds the memory of a derivation whatever the graph's size.
_PAIRS_PER_STEP = 1 << 22


def covers(have: dict[str, Any], need: dict[str, Any]) -> bool:
    """Whether a file built with parameters ``have`` holds everything a request ``need`` reads."""
    try:
        if have["powers"]["normalization"] != need["powers"]["normalization"]:
            return False
        if int(have["powers"]["k"]) < int(need["powers"]["k"]) or have["large"] != need["large"]:
            return False
        for sec in _SECTIONS:
            if need.get(sec, {}).get("enabled") and have.get(sec) != need[sec]:
                return False
        if int(need["partition"].get("parts", 0)) > 0 and have.get("partition") != need["partition"]:
            return False
    except (KeyError, TypeError, ValueError):
        return False
    return True


def _held(params: dict[str, Any]) -> int:
    """A size of what a file holds, to prefer the smallest covering file."""
    return int(params["powers"]["k"]) + sum(4 for s in _SECTIONS if params.get(s, {}).get("enabled"))


def find_superset(folder: Path, fingerprint: str, need: dict[str, Any], exclude: Path | None = None) -> Path | None:
    """The sound cache file in ``folder`` of the same input graphs that holds the most economical superset of
    ``need`` (see :func:`covers`); None if there is none."""
    found: list[tuple[int, str, Path]] = []
    if not Path(folder).is_dir():
        return None
    for p in sorted(Path(folder).glob("*.h5")):
        if p.name.startswith(".") or p.is_symlink() or (exclude is not None and p == exclude):
            continue
        try:
            with h5py.File(p, "r") as f:
                if str(f.attrs.get("fingerprint", "")) != fingerprint or not bool(f.attrs.get("complete", False)):
                    continue
                have = cache_json(f.attrs["params"], p, "params")
        except (*H5_ERRORS, CacheError):
            continue
        if covers(have, need) and not verify(p, fingerprint, full=False):
            found.append((_held(have), p.name, p))
    return min(found)[2] if found else None


def _copy(src: h5py.Dataset, w: CacheWriter, name: str) -> None:
    step = max(1, _PAIRS_PER_STEP // max(1, int(np.prod(src.shape[1:]))))
    for s in range(0, src.shape[0], step):
        w.append(name, src[s:s + step])
    if src.shape[0] == 0:
        w.append(name, src[0:0])


def _copy_powers(g: h5py.Group, w: CacheWriter, k: int) -> None:
    """``powers/{indptr,col,values}`` restricted to ``Â^1..Â^k``, streamed in row ranges."""
    indptr = g["indptr"][()]
    keep_all = g["values"].shape[1] == k
    w.append("powers/indptr", np.zeros(1, dtype=indptr.dtype))
    rows, done = indptr.shape[0] - 1, 0
    kept_total = 0
    while done < rows:
        stop = int(np.searchsorted(indptr, indptr[done] + _PAIRS_PER_STEP, side="right")) - 1
        stop = min(rows, max(stop, done + 1))
        a, b = int(indptr[done]), int(indptr[stop])
        col, vals = g["col"][a:b], g["values"][a:b, :k]
        counts = np.diff(indptr[done:stop + 1])
        if not keep_all:
            keep = np.any(vals != 0, axis=1)
            row = np.repeat(np.arange(stop - done), counts)
            counts = np.bincount(row[keep], minlength=stop - done)
            col, vals = col[keep], vals[keep]
        w.append("powers/indptr", (kept_total + np.cumsum(counts)).astype(indptr.dtype))
        kept_total += int(counts.sum())
        w.append("powers/col", col)
        w.append("powers/values", np.ascontiguousarray(vals))
        done = stop


def _powers_attrs(attrs: h5py.AttributeManager, k: int) -> dict[str, Any]:
    out = dict(attrs)
    out["k"] = k
    if "dropped_mass" in out:
        d = cache_json(out["dropped_mass"], "the source cache", "powers/dropped_mass")
        d["mean"], d["max"] = d["mean"][:k], d["max"][:k]
        out["dropped_mass"] = json.dumps(d)
    return out


def derive(src: Path, path: Path, attrs: dict[str, Any], need: dict[str, Any],
           log: Callable[[str], None] | None = None) -> None:
    """Write the cache file ``path`` (root ``attrs``) with what ``need`` reads, copied from ``src``.

    The result equals, array by array, a file computed with ``need`` (the tests hold the two side by side).
    """
    k = int(need["powers"]["k"])
    groups = ["graphs", "nodes", "powers"] + [s for s in _SECTIONS if need.get(s, {}).get("enabled")]
    with h5py.File(src, "r") as f, CacheWriter(path, attrs) as w:
        for group in groups:
            for name, ds in f[group].items():
                full = f"{group}/{name}"
                if full == "nodes/part" and int(need["partition"].get("parts", 0)) <= 0:
                    continue
                if group == "powers":
                    continue
                _copy(ds, w, full)
            if group == "powers":
                _copy_powers(f["powers"], w, k)
                w.set_attrs("powers", **_powers_attrs(f["powers"].attrs, k))
            elif len(f[group].attrs):
                w.set_attrs(group, **dict(f[group].attrs))
    if log is not None:
        log(f"served from {src}: copied the powers 1..{k} and the sections this preset reads, nothing recomputed")
