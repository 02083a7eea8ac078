"""Reading a cache file: :class:`StructureCache`, lazy per-graph reads (or all in memory), errors that say the fix."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any, cast

import h5py
import numpy as np

from xmask_cli.cache.files import FORMAT_VERSION, H5_ERRORS, cache_json
from xmask_cli.errors import CacheError, first_line

__all__ = ["StructureCache"]


class StructureCache:
    """Read API for one cache file; opens lazily, so it can be passed to loader workers.

    Example::

        from xmask_cli.cache import StructureCache
        c = StructureCache("cache/mutag/<key>.h5")
        row, col, vals = c.powers(0)          # pairs of graph 0 and Â^1..Â^K there
        dense = c.dense_powers(0)             # [K, n, n] float32
        d = c.dense_spd(0)                    # [n, n] int16, -1 beyond cut-off, -2 unreachable
        lam, vec = c.spectrum(0)
    """

    def __init__(self, path: str | os.PathLike[str]):
        self.path = Path(path)
        self._f: h5py.File | None = None
        self._mem: dict[str, np.ndarray] = {}

    # -- file handling
    @property
    def file(self) -> h5py.File:
        if self._f is None:
            try:
                self._f = h5py.File(self.path, "r")
                version = int(self._f.attrs.get("format_version", -1))
            except H5_ERRORS as exc:
                raise CacheError(f"cannot open cache {self.path}: {first_line(exc)}; "
                                 f"run `xmask prepare ... --force` to rebuild it") from exc
            if version != FORMAT_VERSION:
                raise CacheError(
                    f"cache {self.path} has format version {version}, this xmask reads {FORMAT_VERSION}; "
                    f"run `xmask prepare ... --force` to rebuild it"
                )
        return self._f

    def close(self) -> None:
        if self._f is not None:
            self._f.close()
            self._f = None

    def forget_handle(self) -> None:
        """Drop (without closing) a file handle inherited from a parent process; reopen lazily."""
        self._f = None

    @property
    def in_memory(self) -> bool:
        """True once :meth:`load_in_memory` has read the arrays."""
        return bool(self._mem)

    def __getstate__(self) -> dict[str, Any]:
        # h5py handles cannot be pickled: a worker reopens the file on first use.
        return {"path": self.path, "_f": None, "_mem": {}}

    def __enter__(self) -> StructureCache:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def load_in_memory(self) -> StructureCache:
        """Read every array once; later accessors then never touch the file."""
        def visit(name: str, obj: Any) -> None:
            if isinstance(obj, h5py.Dataset):
                self._mem[name] = self._checked(obj, name, None)

        try:
            self.file.visititems(visit)
        except (OSError, RuntimeError) as exc:  # damaged HDF5 metadata (e.g. "bad heap free list")
            raise self._corrupt("file structure", exc) from exc
        return self

    def has(self, name: str) -> bool:
        """Whether the group or dataset ``name`` (e.g. ``"rrwp"``, ``"spd/dist"``) is stored."""
        if self._mem:  # in memory: never touch the file
            return name in self._mem or any(k.startswith(f"{name}/") for k in self._mem)
        try:
            return name in self.file
        except (OSError, RuntimeError) as exc:
            raise self._corrupt(name, exc) from exc

    def _checked(self, ds: h5py.Dataset, name: str, sl: slice | None) -> np.ndarray:
        """Read ``ds`` (or a slice); a checksum or decompression failure becomes a :class:`CacheError`."""
        try:
            return cast(np.ndarray, ds[()] if sl is None else ds[sl])
        except (OSError, RuntimeError) as exc:
            raise self._corrupt(name, exc) from exc

    def _corrupt(self, name: str, exc: BaseException) -> CacheError:
        return CacheError(f"cache {self.path} is corrupt ('{name}': {first_line(exc)}); "
                          f"run `xmask cache verify`, then `xmask prepare ... --force` to rebuild it")

    def read_array(self, name: str, sl: slice | None = None) -> np.ndarray:
        """The stored array ``name`` (e.g. ``"graphs/large"``), or its slice ``sl``.

        Reads from memory after :meth:`load_in_memory`; a missing array or a
        damaged chunk raises :class:`CacheError` with the command that fixes it.
        """
        if name in self._mem:
            arr = self._mem[name]
            return arr if sl is None else arr[sl]
        if not self.has(name):
            raise CacheError(f"cache {self.path} has no '{name}'; prepare it with the structure that needs it")
        try:
            ds = self.file[name]
        except (OSError, RuntimeError, KeyError) as exc:
            raise self._corrupt(name, exc) from exc
        return self._checked(ds, name, sl)

    # -- metadata
    @property
    def params(self) -> dict[str, Any]:
        return cache_json(self.file.attrs.get("params"), self.path, "params")

    @property
    def fingerprint(self) -> str:
        return str(self.file.attrs["fingerprint"])

    @property
    def num_graphs(self) -> int:
        return int(self.read_array("graphs/num_nodes").shape[0])

    def num_nodes(self, g: int) -> int:
        return int(self.read_array("graphs/num_nodes", slice(g, g + 1))[0])

    def node_slice(self, g: int) -> slice:
        """Graph ``g``'s rows in the per-node arrays (``nodes/*``, the ``indptr`` of pair groups)."""
        p = self.read_array("graphs/node_ptr", slice(g, g + 2))
        return slice(int(p[0]), int(p[1]))

    def num_pairs(self, group: str, g: int) -> int:
        """Stored pairs of graph ``g`` in a pair group (``powers``, ``spd``, ``rrwp``), without reading them."""
        nodes = self.node_slice(g)
        ip = self.read_array(f"{group}/indptr", slice(nodes.start, nodes.stop + 1))
        return int(ip[-1] - ip[0])

    # -- per-graph accessors
    def pairs(self, group: str, g: int) -> dict[str, np.ndarray]:
        """All arrays of a pair group (``powers``, ``spd``, ``rrwp``) for graph ``g``."""
        nodes = self.node_slice(g)
        ip = self.read_array(f"{group}/indptr", slice(nodes.start, nodes.stop + 1))
        sl = slice(int(ip[0]), int(ip[-1]))
        names = [k for k in ("col", "values", "dist", "attr") if self.has(f"{group}/{k}")]
        out = {k: self.read_array(f"{group}/{k}", sl) for k in names}
        out["row"] = np.repeat(np.arange(len(ip) - 1, dtype=np.int32), np.diff(ip))
        return out

    def powers(self, g: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(row, col, values[P, K])`` of graph ``g``: Â^1..Â^K on their union support."""
        d = self.pairs("powers", g)
        return d["row"], d["col"], d["values"]

    def dense_powers(self, g: int) -> np.ndarray:
        """``[K, n, n]`` float32 powers of graph ``g`` (zeros off the stored support)."""
        row, col, vals = self.powers(g)
        n = self.num_nodes(g)
        out = np.zeros((vals.shape[1], n, n), dtype=np.float32)
        out[:, row, col] = vals.T
        return out

    def spd(self, g: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        d = self.pairs("spd", g)
        return d["row"], d["col"], d["dist"]

    def dense_spd(self, g: int) -> np.ndarray:
        """``[n, n]`` int16 hop distances: ``-1`` beyond the cut-off, ``-2`` unreachable."""
        from xmask_cli.structure.spd import PairDistances

        return PairDistances(*self.spd(g), self.component(g)).block()

    def rrwp(self, g: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        d = self.pairs("rrwp", g)
        return d["row"], d["col"], d["values"]

    def edge(self, g: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(row, col, attr [S, C])`` of graph ``g``: the pairs an edge joins, with that edge's attributes."""
        d = self.pairs("edge", g)
        return d["row"], d["col"], d["attr"]

    def edge_coding(self) -> tuple[str, tuple[int, ...]]:
        """``(encoding, dims)`` of the stored edge attributes, checked (see
        :class:`~xmask_cli.structure.edge_attrs.EdgeCoding`).

        Raises:
            CacheError: the file has no edge section, or records a coding this version does not know or
                that does not match its ``edge/attr`` columns.
        """
        from xmask_cli.structure.edge_attrs import EdgeCoding

        if not self.has("edge/attr"):
            raise CacheError(f"cache {self.path} has no 'edge' section; prepare it with an edge bias in "
                             f"model.biases (structure.edge.enabled=true)")
        try:
            attrs = dict(self.file["edge"].attrs)
            coding = EdgeCoding(str(attrs["encoding"]), tuple(int(d) for d in np.asarray(attrs["dims"]).ravel()))
            cols = int(self.read_array("edge/attr", slice(0, 0)).shape[1])
        except (KeyError, TypeError, ValueError, IndexError, OSError) as exc:
            raise CacheError(f"cache {self.path} records an unusable edge coding ({first_line(exc)}); "
                             f"rebuild it with `xmask prepare ... --force`") from None
        if cols != coding.columns:
            raise CacheError(f"cache {self.path}: edge/attr has {cols} columns but its coding "
                             f"({coding.encoding}, dims {list(coding.dims)}) says {coding.columns}; "
                             f"rebuild it with `xmask prepare ... --force`")
        return coding.encoding, coding.dims

    def component(self, g: int) -> np.ndarray:
        return self.read_array("nodes/component", self.node_slice(g))

    def partition(self, g: int) -> np.ndarray:
        return self.read_array("nodes/part", self.node_slice(g))

    def _eig(self, group: str, g: int) -> tuple[np.ndarray, np.ndarray]:
        vp = self.read_array(f"{group}/val_ptr", slice(g, g + 2))
        xp = self.read_array(f"{group}/vec_ptr", slice(g, g + 2))
        vals = self.read_array(f"{group}/eigvals", slice(int(vp[0]), int(vp[1])))
        flat = self.read_array(f"{group}/eigvecs", slice(int(xp[0]), int(xp[1])))
        return vals, flat.reshape(self.num_nodes(g), vals.shape[0])

    def spectrum(self, g: int) -> tuple[np.ndarray, np.ndarray]:
        """``(eigenvalues ascending, eigenvectors [n, m])`` of the normalized Laplacian."""
        return self._eig("spectrum", g)

    def magnetic(self, g: int) -> tuple[np.ndarray, np.ndarray]:
        """``(eigenvalues, complex eigenvectors [n, m])`` of the magnetic Laplacian."""
        return self._eig("magnetic", g)
