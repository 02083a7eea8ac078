"""Peak memory and time of dual-mode attention: sparse vs dense vs dual.

One forward + backward of :class:`RoutedAttention`'s local expert (a
``RoutedAttention`` with ``experts=('local',)``, so its weight is 1) over a
graph's local mask (``A + I``, or ``(A + I)^hops``), with a learnable per-pair
bias, in each mode. Dual-mode regions come from METIS parts (``--part-size``
nodes each, cut to ``--region-queries`` queries) and ``threshold='auto'``.

Every mode runs in a fresh child process, so one mode's allocations cannot
hide another's. In the child:

- ``MALLOC_MMAP_THRESHOLD_`` is set so large tensors are mmapped and returned
  to the OS when freed (RSS then follows live memory);
- one warm-up step runs first (not measured), then the high-water mark is
  reset (``/proc/self/clear_refs`` = 5), and the peak of one more step is
  ``VmHWM - VmRSS`` before it (``peak MB``: the step's own extra memory);
- time: best of ``--repeat`` steps.

Graphs: ``--graph sbm`` (default) is a stochastic block model with
``--nodes`` nodes in blocks of ``--block-size``; ``Cora``, ``CiteSeer``,
``CS``, ``Physics``, ``Computers``, ``Photo`` load the raw files from
``$XMASK_DATA_ROOT`` (else ``../shared/datasets``; copied to a temp dir: the loader writes
``processed/``). Dense mode is skipped when its ``N² · H`` mask alone would
pass ``--dense-limit-gb``.

    python benchmarks/dualmode_memory.py --nodes 20000 --threads 1 --out dual.json
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import scipy.sparse as sp

REPO = Path(__file__).resolve().parents[1]
DATASETS = Path(os.environ.get("XMASK_DATA_ROOT") or os.environ.get("XMASK_TEST_DATA") or REPO.parent / "shared" / "datasets")
MODES = ("sparse", "dual", "dense")
LOADERS = {"Cora": "Planetoid", "CiteSeer": "Planetoid", "CS": "Coauthor", "Physics": "Coauthor",
           "Computers": "Amazon", "Photo": "Amazon"}


def _status_kb(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"{field} not in /proc/self/status")


def sbm_adjacency(n: int, block_size: int, deg_in: float, deg_out: float, seed: int) -> sp.csr_matrix:
    """Symmetric SBM adjacency (no self loops): about ``deg_in`` neighbours in the block, ``deg_out`` outside."""
    rng = np.random.default_rng(seed)
    block = np.arange(n) // block_size
    m_in, m_out = int(n * deg_in / 2), int(n * deg_out / 2)
    src = rng.integers(0, n, m_in)
    size = np.minimum(block_size, n - block[src] * block_size)
    dst_in = block[src] * block_size + (rng.random(m_in) * size).astype(np.int64)
    src_out, dst_out = rng.integers(0, n, m_out), rng.integers(0, n, m_out)
    row = np.concatenate([src, src_out])
    col = np.concatenate([dst_in, dst_out])
    keep = row != col
    a = sp.coo_matrix((np.ones(keep.sum()), (row[keep], col[keep])), shape=(n, n)).tocsr()
    a = ((a + a.T) > 0).astype(np.float32)
    # Shuffle node ids: regions must come from the partition, not from the generator's order.
    perm = rng.permutation(n)
    return a[perm][:, perm].tocsr()


def dataset_adjacency(name: str) -> sp.csr_matrix:
    """Adjacency of a PyG node dataset, loaded offline from a temp copy of its raw files."""
    import torch_geometric.datasets as D

    with tempfile.TemporaryDirectory() as tmp:
        shutil.copytree(DATASETS / name / "raw", Path(tmp) / name / "raw")
        loader = getattr(D, LOADERS[name])
        data = loader(tmp, name)[0]
    ei = data.edge_index.numpy()
    n = data.num_nodes
    a = sp.coo_matrix((np.ones(ei.shape[1]), (ei[0], ei[1])), shape=(n, n)).tocsr()
    a = ((a + a.T) > 0).astype(np.float32)
    a.setdiag(0)
    a.eliminate_zeros()
    return a


def prepare(args: argparse.Namespace, path: Path) -> dict:
    """Graph, local mask and METIS parts, written once for all children."""
    sys.path.insert(0, str(REPO))
    from xmask_cli.structure.partition import metis_parts

    t0 = time.perf_counter()
    if args.graph == "sbm":
        a = sbm_adjacency(args.nodes, args.block_size, args.deg_in, args.deg_out, args.seed)
    else:
        a = dataset_adjacency(args.graph)
    n = a.shape[0]
    load_s = time.perf_counter() - t0
    mask = a + sp.identity(n, format="csr", dtype=np.float32)
    for _ in range(args.hops - 1):
        mask = ((mask @ (a + sp.identity(n, format="csr"))) > 0).astype(np.float32)
    mask = sp.csr_matrix(mask)
    t0 = time.perf_counter()
    parts = metis_parts(a, max(1, round(n / args.part_size)), seed=args.seed)
    metis_s = time.perf_counter() - t0
    coo = mask.tocoo()
    np.savez(path, row=coo.row.astype(np.int64), col=coo.col.astype(np.int64), parts=parts.astype(np.int64))
    return {"graph": args.graph, "nodes": int(n), "edges": int(a.nnz), "mask_pairs": int(coo.nnz),
            "parts": int(parts.max()) + 1, "load_s": round(load_s, 2), "metis_s": round(metis_s, 2)}


def child(args: argparse.Namespace) -> None:
    """One mode in this process; prints a JSON line."""
    import torch

    sys.path.insert(0, str(REPO))
    from xmask_cli.model.attention.dualmode import plan_regions, region_summary
    from xmask_cli.model.experts import RoutedAttention

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    z = np.load(args.graph_file)
    ei = torch.from_numpy(np.stack([z["row"], z["col"]]))
    parts = torch.from_numpy(z["parts"])
    n = len(parts)
    heads, head_dim = args.heads, args.dim // args.heads
    result = {"mode": args.child, "threads": args.threads}
    est_dense_gb = n * n * heads * 4 / 1e9
    if args.child == "dense" and est_dense_gb > args.dense_limit_gb:
        result.update(skipped=f"N^2*H float mask alone {est_dense_gb:.1f} GB > --dense-limit-gb")
        print(json.dumps(result))
        return
    regions = None
    if args.child == "dual":
        t0 = time.perf_counter()
        regions = plan_regions(ei, n, parts, args.region_queries, args.threshold if args.threshold is not None
                               else "auto", head_dim=head_dim)
        result["plan_s"] = round(time.perf_counter() - t0, 3)
        result.update(region_summary(regions))
    layer = RoutedAttention(args.dim, heads, experts=("local",)).train()
    x = torch.randn(n, args.dim, requires_grad=True)
    bias = torch.randn(ei.size(1), heads, requires_grad=True)  # stands for a learned structural bias

    def step() -> None:
        out = layer(x, {"local": ei}, {"local": bias}, mode=args.child, regions={"local": regions})
        out.square().mean().backward()
        layer.zero_grad(set_to_none=True)
        x.grad = bias.grad = None

    step()  # warm-up: lazy initialisation, thread pools
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # reset VmHWM to the current RSS
    rss0 = _status_kb("VmRSS")
    step()
    result["peak_mb"] = round((_status_kb("VmHWM") - rss0) / 1024, 1)
    result["rss_before_mb"] = round(rss0 / 1024, 1)
    times = []
    for _ in range(args.repeat):
        t0 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)
    result["time_s"] = round(min(times), 4)
    result["times_s"] = [round(t, 4) for t in times]
    print(json.dumps(result))


def model_mb(info: dict, res: dict, args: argparse.Namespace) -> float | None:
    """Forward floats of the memory model in the module docstring of ``dualmode`` (MB)."""
    h, d = args.heads, args.dim // args.heads
    if res["mode"] == "sparse":
        floats = info["mask_pairs"] * h * (2 * d + 2)
    elif res["mode"] == "dense":
        floats = info["nodes"] ** 2 * h * 3 + info["nodes"] * h * 2 * d
    elif "dense_cells" in res:
        sparse_pairs = res["pairs"] - res["dense_pairs"]
        floats = sparse_pairs * h * (2 * d + 2) + res["dense_cells"] * h * 3
    else:
        return None
    return round(floats * 4 / 2**20, 1)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--graph", default="sbm", choices=["sbm", *LOADERS])
    p.add_argument("--nodes", type=int, default=20000, help="sbm only")
    p.add_argument("--block-size", type=int, default=100, help="sbm only")
    p.add_argument("--deg-in", type=float, default=40.0, help="sbm: mean neighbours inside the block")
    p.add_argument("--deg-out", type=float, default=1.0, help="sbm: mean neighbours outside")
    p.add_argument("--hops", type=int, default=1, help="local mask (A+I)^hops")
    p.add_argument("--part-size", type=int, default=100, help="METIS part size (nodes)")
    p.add_argument("--region-queries", type=int, default=256)
    p.add_argument("--threshold", type=float, default=None, help="density threshold (default: auto)")
    p.add_argument("--dim", type=int, default=64)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--modes", default=",".join(MODES))
    p.add_argument("--dense-limit-gb", type=float, default=2.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, default=None, help="JSON file for the figures")
    p.add_argument("--child", choices=MODES, help=argparse.SUPPRESS)
    p.add_argument("--graph-file", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        child(args)
        return

    env = dict(os.environ)
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        env[var] = str(args.threads)
    env["MALLOC_MMAP_THRESHOLD_"] = "65536"  # big tensors mmapped: freed memory leaves RSS
    env["MALLOC_TRIM_THRESHOLD_"] = "65536"
    with tempfile.TemporaryDirectory() as tmp:
        graph_file = Path(tmp) / "graph.npz"
        info = prepare(args, graph_file)
        print(f"{info['graph']}: {info['nodes']} nodes, {info['edges']} adjacency entries, "
              f"{info['mask_pairs']} mask pairs, {info['parts']} METIS parts")
        results = []
        passthrough = [a for a in sys.argv[1:] if not a.startswith("--out")]
        if args.out is not None and str(args.out) in passthrough:
            passthrough.remove(str(args.out))
        for mode in args.modes.split(","):
            cmd = [sys.executable, __file__, *passthrough, "--child", mode, "--graph-file", str(graph_file)]
            proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
            if proc.returncode:
                res = {"mode": mode, "error": proc.stderr.strip().splitlines()[-1:]}
            else:
                res = json.loads(proc.stdout.strip().splitlines()[-1])
            if "peak_mb" in res:
                res["model_mb"] = model_mb(info, res, args)
            results.append(res)
    print(f"{'mode':7} {'peak MB':>9} {'model MB':>9} {'fwd+bwd s':>10}  regions (dense)")
    for r in results:
        if "peak_mb" not in r:
            print(f"{r['mode']:7} {r.get('skipped') or r.get('error')}")
            continue
        reg = f"{r['regions']} ({r['dense_regions']}, {r['dense_pairs']}/{r['pairs']} pairs)" if "regions" in r else ""
        print(f"{r['mode']:7} {r['peak_mb']:9.1f} {r['model_mb']:9.1f} {r['time_s']:10.3f}  {reg}")
    if args.out is not None:
        payload = {"graph": info, "args": {k: v for k, v in vars(args).items()
                                           if k not in ("child", "graph_file", "out")}, "results": results}
        args.out.write_text(json.dumps(payload, indent=1, default=str))


if __name__ == "__main__":
    main()
