#!/usr/bin/env python
"""Cora training step: the CSR sparse kernel against the per-pair gather kernel, PyG TransformerConv and dense.

One step = forward, cross-entropy on the public training nodes,
backward, grad-norm clipping at 1.0, AdamW (``train_speed.py``'s step).
Model: ``XMaskNet`` node task, hidden 64, 4 heads, 2 layers (``--hidden``,
``--heads``, ``--layers``). For each ``K`` in ``--powers`` the attended
pairs are the union support of ``Â^1..Â^K`` read from the cache, and head
``h`` reads ``Â^{1 + (h mod K)}`` (K=4: 1,2,3,4; K=2: 1,2,1,2). Sides, all on
the same pairs, timed interleaved in one process (``train_speed.interleaved``:
warm-up, then rounds alternating the order), medians reported:

- ``csr``: ``forward_sparse`` with the CSR kernel (each head over its own
  support) on the CPU's default implementation, the fused compiled kernels
  (``model/attention/csr_fused.py``: one pass over each row's entries);
- ``csr_torch``: the same kernel on ``torch.sparse`` primitives
  (``sampled_addmm``, segment softmax, CSR @ dense; the implementation on
  other devices), asserted to give the same outputs as ``csr`` first;
- ``gather``: the same model with ``sparse_kernel='gather'`` (the kernel
  before: ``[E, H, d_h]`` gathers per pair, as TransformerConv);
- ``transformerconv``: the same layout with PyG ``TransformerConv`` over the
  union pairs (``train_speed.PeerTransformer``);
- ``dense``: ``forward_dense`` over the ``[1, K, N, N]`` powers (for the
  dense/sparse cut-off of ``model/attention/path.py``).

``--peers-for`` limits the two slow sides (gather, TransformerConv) to some K.
``--every-head-max`` adds the largest K with every head reading ``Â^K`` (the
most pairs the CSR kernel gets at that union density: the worst case for the
cut-off). Ratios are shown as ratio of medians and, in brackets, the median of
the per-round ratios (robust to load bursts from other processes).

Usage::

    nice -n 10 python benchmarks/sparse_kernel.py --threads 1
    python benchmarks/sparse_kernel.py --threads 1 --powers 2,4 --repeat 3

Prints a markdown table; JSON goes to ``benchmarks/out/sparse_kernel.json``.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

from train_speed import DEFAULT_DATA_ROOT, Cora, PeerTransformer, _step_fn, interleaved  # noqa: E402


def measure(cora: Cora, k: int, args: argparse.Namespace, peers: bool, every_head_max: bool = False) -> dict[str, Any]:
    """Median step seconds of each side for the union support of ``Â^1..Â^k``.

    ``every_head_max``: every head reads ``Â^k`` (each head's support is the
    whole union: the most pairs the CSR kernel can get for this union density).
    """
    import torch

    from xmask_cli.model.network import ModelConfig, XMaskNet

    keep = cora.values[:, k - 1] > 0 if k < cora.values.size(1) else torch.ones(cora.values.size(0), dtype=torch.bool)
    # Â^k's support holds Â^1..Â^{k-1}'s (self loops), so "Â^k > 0" is the union of Â^1..Â^k.
    pairs = cora.pairs[:, keep].contiguous()
    values = cora.values[keep, :k].contiguous()
    powers = cora.powers[:, :k].contiguous()
    head_powers = (k,) * args.heads if every_head_max else tuple(1 + h % k for h in range(args.heads))
    cfg = ModelConfig(in_dim=cora.x.size(1), out_dim=cora.num_classes, hidden=args.hidden, heads=args.heads,
                      layers=args.layers, task="node", head_powers=head_powers)
    torch.manual_seed(0)
    csr, csr_torch, gather, dense = XMaskNet(cfg), XMaskNet(cfg), XMaskNet(cfg), XMaskNet(cfg)
    for m in gather.modules():
        if hasattr(m, "sparse_kernel"):
            m.sparse_kernel = "gather"
    csr_torch.load_state_dict(csr.state_dict())
    for m in csr_torch.modules():
        if hasattr(m, "csr_impl"):
            m.csr_impl = "sparse"
    with torch.no_grad():  # the same outputs on both implementations, or the timing compares nothing
        a, b = csr.eval().forward_sparse(cora.x, pairs, values), csr_torch.eval().forward_sparse(cora.x, pairs, values)
        assert float((a - b).abs().max()) <= 1e-4 * float(b.abs().max()), "csr implementations disagree"
    csr.train(), csr_torch.train()
    x1 = cora.x.unsqueeze(0)
    sides = {
        "csr": _step_fn(csr, lambda: csr.forward_sparse(cora.x, pairs, values), cora.y, cora.train),
        "csr_torch": _step_fn(csr_torch, lambda: csr_torch.forward_sparse(cora.x, pairs, values), cora.y, cora.train),
        "dense": _step_fn(dense, lambda: dense.forward_dense(x1, powers)[0], cora.y, cora.train),
    }
    if peers:
        peer = PeerTransformer.build(cora.x.size(1), cora.num_classes, args.hidden, args.heads, args.layers)
        sides["gather"] = _step_fn(gather, lambda: gather.forward_sparse(cora.x, pairs, values), cora.y, cora.train)
        sides["transformerconv"] = _step_fn(peer, lambda: peer(cora.x, pairs), cora.y, cora.train)
    t = interleaved(sides, args.repeat, args.warmup)
    per_head = [int((values[:, p - 1] > 0).sum()) for p in head_powers]
    row = {"K": k, "every_head_max": every_head_max, "pairs": int(pairs.size(1)), "density": pairs.size(1) / cora.n ** 2,
           "pairs_per_head": per_head, "head_powers": list(head_powers),
           "median_s": {n: v["median_s"] for n, v in t.items()}, "runs": {n: v["runs"] for n, v in t.items()}}
    med = row["median_s"]
    for other in ("csr_torch", "gather", "transformerconv", "dense"):
        if other in med:
            row[f"{other}_over_csr"] = med[other] / med["csr"]
            rounds = [a / b for a, b in zip(t[other]["runs"], t["csr"]["runs"])]
            row[f"{other}_over_csr_rounds"] = rounds
            row[f"{other}_over_csr_round_median"] = statistics.median(rounds)
    return row


def table(rows: list[dict[str, Any]]) -> str:
    lines = ["| K | union pairs | density | pairs per head | csr s | csr (torch.sparse) s | gather s | "
             "TransformerConv s | dense s | csr torch.sparse / fused | TConv / csr | gather / csr | dense / csr |",
             "|---|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]

    def f(r: dict, key: str, fmt: str) -> str:
        # ratio of medians, and in brackets the median of the per-round ratios (robust to load bursts)
        if key not in r:
            return "–"
        return f"{format(r[key], fmt)}x ({format(r[key + '_round_median'], fmt)}x)"

    for r in rows:
        m = r["median_s"]
        lines.append(f"| 1..{r['K']}{' (every head Â^K)' if r.get('every_head_max') else ''} | {r['pairs']:,} | {100 * r['density']:.2f} % | {r['pairs_per_head']} | "
                     f"{m['csr']:.3f} | {m['csr_torch']:.3f} | {m.get('gather', float('nan')):.3f} | "
                     f"{m.get('transformerconv', float('nan')):.3f} | {m['dense']:.3f} | "
                     f"{f(r, 'csr_torch_over_csr', '.2f')} | "
                     f"{f(r, 'transformerconv_over_csr', '.2f')} | {f(r, 'gather_over_csr', '.2f')} | "
                     f"{f(r, 'dense_over_csr', '.2f')} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data-root", type=Path, default=DEFAULT_DATA_ROOT)
    p.add_argument("--cache-dir", type=Path, default=None, help="structure caches (default: a temporary dir)")
    p.add_argument("--threads", type=int, default=1, help="torch threads (default: %(default)s)")
    p.add_argument("--powers", default="1,2,3,4", help="K values: union support of Â^1..Â^K (default: %(default)s)")
    p.add_argument("--peers-for", default="2,4", help="K values that also time gather and TransformerConv")
    p.add_argument("--every-head-max", action="store_true",
                   help="also time the largest K with every head reading Â^K (csr and dense only)")
    p.add_argument("--repeat", type=int, default=7)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--out", type=Path, default=HERE / "out" / "sparse_kernel.json")
    args = p.parse_args(argv)

    import torch

    torch.set_num_threads(args.threads)
    tmp = tempfile.TemporaryDirectory(prefix="xmask-kernel-") if args.cache_dir is None else None
    cache_dir = args.cache_dir or Path(tmp.name)
    meta = {"date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"), "torch": torch.__version__,
            "threads": args.threads, "cpu_count": os.cpu_count(), "load_average_start": list(os.getloadavg()),
            "repeat": args.repeat, "warmup": args.warmup,
            "model": {"hidden": args.hidden, "heads": args.heads, "layers": args.layers},
            "command": " ".join([Path(sys.executable).name, *sys.argv])}
    rows: list[dict[str, Any]] = []
    peers_for = {int(k) for k in args.peers_for.split(",") if k.strip()}
    try:
        cora = Cora(args.data_root, cache_dir)
        for k in (int(s) for s in args.powers.split(",") if s.strip()):
            print(f"# K={k} ...", file=sys.stderr, flush=True)
            rows.append(measure(cora, k, args, k in peers_for))
            print(table(rows[-1:]).splitlines()[-1], file=sys.stderr, flush=True)
        if args.every_head_max and rows:
            print(f"# K={rows[-1]['K']}, every head Â^K ...", file=sys.stderr, flush=True)
            rows.append(measure(cora, rows[-1]["K"], args, False, every_head_max=True))
    finally:
        meta["load_average_end"] = list(os.getloadavg())
        args.out.parent.mkdir(parents=True, exist_ok=True)
        tmp_out = args.out.with_suffix(".json.tmp")
        tmp_out.write_text(json.dumps({"meta": meta, "rows": rows}, indent=2) + "\n")
        os.replace(tmp_out, args.out)
        if tmp is not None:
            tmp.cleanup()
    print(table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
