#!/usr/bin/env python
"""xmask beside the graph transformers (and the PyG example recipes) a user would pick instead: one table.

Per dataset, every side runs as its own child process, one torch thread (``OMP_NUM_THREADS=1``,
``peers.py --threads 1``), and each row records:

* test mean ± population std over the seeds (selection on validation only: xmask's rule on both sides);
* precompute: ``xmask prepare`` seconds and cache MB for xmask (what the CLI reports); the random-walk
  encodings of GPS (its one precompute); none for the others;
* peak RSS of the training process (``ru_maxrss`` of the child, from ``os.wait4``);
* seconds per epoch: the median training time of an epoch (xmask: ``train_s`` of its ``metrics.jsonl``;
  peers: the same span, forward + backward + step, timed by ``peers.py``), evaluation excluded;
* parameter count (xmask: the best checkpoint's weights, BatchNorm statistics excluded).

A row that cannot fit or finish is run as a probe (``--probe NAME=K``: K epochs, or K batches for graph GPS)
and shows its measured s / epoch and peak RSS with the reason; a row over the memory cap is not started and
shows the estimate and how it was made.

Usage::

    python benchmarks/transformers_table.py run Cora --seeds 0-2 --peers GCN-example,GAT-example,SGFormer
    python benchmarks/transformers_table.py run Cora --peers Polynormer --seeds 0 --peer-epochs Polynormer=40
    python benchmarks/transformers_table.py run Cora --peers GPS --probe GPS=1 --no-xmask
    python benchmarks/transformers_table.py table            # markdown from benchmarks/out/transformers/*.json

Rows are JSON files in ``--out-dir`` (default ``benchmarks/out/transformers``), one per (dataset, side):
an interrupted session keeps what finished, ``table`` reads whatever is there.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
OUT = HERE / "out" / "transformers"
NODE_SETS = ("Cora", "CiteSeer", "Computers", "Physics")
GRAPH_SETS = ("PROTEINS", "NCI1", "ogbg-molhiv")
#: Column order of the table: xmask first, then the peers as peers.py names them.
SIDES = ("xmask", "GCN-example", "GAT-example", "GCN-tuned", "GAT-tuned", "SGFormer", "Polynormer", "GIN", "GPS")
NODE_COUNTS = {"Cora": 2708, "CiteSeer": 3327, "Computers": 13752, "Physics": 34493}


def parse_pairs(items: list[str]) -> dict[str, str]:
    """``["GPS=1", "Polynormer=40"]`` -> ``{"GPS": "1", "Polynormer": "40"}``."""
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep:
            raise argparse.ArgumentTypeError(f"expected NAME=VALUE, got {item!r}")
        out[key.strip()] = value.strip()
    return out


def run_child(cmd: list[str], env: dict[str, str] | None = None, log: Path | None = None) -> dict[str, Any]:
    """Run ``cmd``; its wall seconds, exit code and peak RSS (MB, from ``os.wait4``), with the load averages.

    Linux keeps the peak RSS across exec, so the figure is at least this process's RSS at the spawn: keep the
    parent light (it holds only imports, about 220 MB with torch)."""
    load0 = list(os.getloadavg())
    t = time.perf_counter()
    with open(log or os.devnull, "w") as err:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, env={**os.environ, **(env or {})},
                                cwd=str(REPO))
        out = proc.stdout.read() if proc.stdout else b""
        _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    return {"cmd": " ".join(cmd), "rc": proc.returncode, "wall_s": time.perf_counter() - t,
            "peak_rss_mb": usage.ru_maxrss / 1024.0, "load_before": load0, "load_after": list(os.getloadavg()),
            "stdout": out.decode(errors="replace")}


def _threads_env() -> dict[str, str]:
    return {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "NUMBA_NUM_THREADS": "1",
            "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}


def _peers() -> Any:
    """benchmarks/peers_common.py as a module (the preset budgets the peers read)."""
    if str(HERE) not in sys.path:
        sys.path.insert(0, str(HERE))
    import peers_common

    return peers_common


def xmask_params(run_dir: Path) -> int:
    """Weights in the run's best checkpoint (BatchNorm running statistics excluded)."""
    import torch

    state = torch.load(run_dir / "best.pt", map_location="cpu", weights_only=False)["model"]
    return int(sum(v.numel() for k, v in state.items()
                   if v.is_floating_point() and "running_" not in k))


def label(preset: str) -> str:
    """A preset's name in row labels and file names: the name itself, or a YAML path's file stem
    (``benchmarks/presets/computers-full.yaml`` -> ``computers-full``)."""
    return Path(preset).stem if preset.endswith((".yaml", ".yml")) else preset


def run_prepare(ds: str, data_root: Path, cache: Path, log_dir: Path, preset: str | None = None) -> dict[str, Any]:
    """``xmask prepare <ds> --preset <preset>`` (default: the dataset's own preset) in a child: the CLI's JSON
    (seconds, size_bytes, key, cached) and the child's peak RSS."""
    base = [sys.executable, "-m", "xmask_cli", "--format", "json"]
    env = {**_threads_env(), "XMASK_CACHE": str(cache), "XMASK_DATA_ROOT": str(data_root)}
    prep = run_child(base + ["prepare", ds, "--preset", preset or ds.lower()], env, log_dir / f"{ds}-xmask-prepare.log")
    if prep["rc"] != 0:
        return {"status": "failed", "reason": f"xmask prepare exited {prep['rc']}", "prepare": prep}
    return {"status": "ok", **json.loads(prep.pop("stdout")), "child": prep}


def run_xmask(ds: str, seeds: str, data_root: Path, cache: Path, epochs: int | None, log_dir: Path,
              prepared: Path | None = None, preset: str | None = None) -> dict[str, Any]:
    """``xmask prepare`` then ``xmask train --preset <preset> --seeds ...`` (default: the dataset's own preset),
    each a child process. When the cache was filled earlier by ``transformers_table.py prepare`` (``prepared``:
    its JSON, the same cache key), the prepare figures are that measured run's."""
    preset = preset or ds.lower()
    base = [sys.executable, "-m", "xmask_cli", "--format", "json"]
    env = {**_threads_env(), "XMASK_CACHE": str(cache), "XMASK_DATA_ROOT": str(data_root)}
    pj = run_prepare(ds, data_root, cache, log_dir, preset)
    if pj["status"] != "ok":
        return pj
    prep = pj.pop("child")
    if pj["cached"] and prepared is not None and prepared.exists():
        earlier = json.loads(prepared.read_text())
        if earlier.get("key") == pj["key"] and not earlier.get("cached"):
            pj, prep = earlier, earlier["child"]
    runs_dir = Path(tempfile.mkdtemp(prefix=f"xmask-table-{label(preset)}-"))
    cmd = base[:3] + ["train", "--preset", preset, "--seeds", seeds, "--runs-dir", str(runs_dir), "--format", "json"]
    if epochs:
        cmd += ["--set", f"train.epochs={epochs}"]
    own = "" if preset == ds.lower() else f"-{label(preset)}"  # another preset's log beside the dataset's own
    train = run_child(cmd, env, log_dir / f"{ds}-xmask{own}-train.log")
    if train["rc"] != 0:
        return {"status": "failed", "reason": f"xmask train exited {train['rc']}", "train": train}
    tj = json.loads(train.pop("stdout"))
    epoch_s, runs = [], []
    for r in tj["runs"]:
        rows = [json.loads(line) for line in Path(r["run_dir"], "metrics.jsonl").read_text().splitlines() if line]
        epoch_s += [row["train_s"] for row in rows]
        runs.append({"seed": r["seed"], "metrics": r["metrics"], "best_epoch": r["best_epoch"],
                     "epochs_run": r["epochs_run"]})
    test = np.array([r["metrics"]["test"] for r in runs])
    budget = _peers().preset_budget(ds, preset)
    return {"status": "ok", "metric": tj["metric"], "seeds": [r["seed"] for r in runs],
            "test": {"mean": float(test.mean()), "std": float(test.std()), "values": test.tolist()},
            "seconds_per_epoch": float(np.median(epoch_s)), "epochs_run_mean": float(np.mean(
                [r["epochs_run"] for r in runs])), "params": xmask_params(Path(tj["runs"][0]["run_dir"])),
            "prepare_seconds": pj["seconds"], "cache_mb": pj["size_bytes"] / 1e6, "prepare_cached": pj["cached"],
            "prepare_peak_rss_mb": prep["peak_rss_mb"], "prepare_load": prep["load_before"],
            "peak_rss_mb": train["peak_rss_mb"],
            "budget": {"epochs": epochs or budget["epochs"], "patience": budget["patience"]},
            "runs": runs, "prepare": prep, "train": train}


def run_peer(ds: str, model: str, seeds: str, data_root: Path, epochs: int | None, probe: int,
             log_dir: Path) -> dict[str, Any]:
    """``peers.py`` for one (dataset, peer) in a child process; its summary row and per-run figures."""
    peers = _peers()
    graph = ds in GRAPH_SETS
    out = Path(tempfile.mkstemp(prefix=f"peers-{ds}-{model}-", suffix=".json")[1])
    cmd = [sys.executable, str(HERE / "peers.py"), "--threads", "1", "--seeds", seeds, "--data-root", str(data_root),
           "--out", str(out)]
    budget = peers.preset_budget(ds)
    if graph:
        cmd += ["--only", "graph", "--graph-datasets", ds, "--graph-models", model]
        if model == "GIN":  # the protocol GIN: its own loop, given the preset's budget
            cmd += ["--graph-epochs", str(epochs or budget["epochs"]), "--graph-patience", str(budget["patience"])]
        if probe:
            cmd += ["--probe-batches", str(probe)]
    else:
        cmd += ["--only", "node", "--node-datasets", ds, "--node-models", model]
        if probe:
            cmd += ["--probe-epochs", str(probe)]
    if epochs:
        cmd += ["--epochs", str(epochs)]
    res = run_child(cmd, _threads_env(), log_dir / f"{ds}-{model}.log")
    res.pop("stdout")
    if res["rc"] != 0 or not out.exists() or not out.stat().st_size:
        return {"status": "failed", "reason": f"peers.py exited {res['rc']}", "child": res}
    pj = json.loads(out.read_text())
    out.unlink()
    row = pj["summary"][0]
    first = pj["runs"][0]
    per_epoch = row.get("seconds_per_epoch")
    if per_epoch is None and model == "GIN":  # the protocol loop times runs, not epochs
        per_epoch = float(np.mean([r["seconds"] / max(r["epochs_run"], 1) for r in pj["runs"]]))
    return {"status": "probe" if row["probe"] else "ok", "metric": row["metric"], "seeds": row["seeds"],
            "test": row["test"], "val": row["val"], "seconds_per_epoch": per_epoch,
            "epochs_run_mean": row["epochs_run_mean"], "params": row.get("params"),
            "precompute_seconds": row.get("precompute_seconds"), "peak_rss_mb": res["peak_rss_mb"],
            "probe": probe or None, "hp": first.get("hp"),
            "budget": {"epochs": epochs or budget["epochs"], "patience": budget["patience"]},
            "runs": [{k: r.get(k) for k in ("seed", "metrics", "best_epoch", "epochs_run", "seconds",
                                              "seconds_per_epoch")} for r in pj["runs"]], "child": res}


def gps_memory_estimate(measured: dict[str, Any], ds: str) -> dict[str, Any]:
    """Node-level GPS: peak RSS scaled by (N / N_measured)^2 above the measured process's base (its dense
    N x N attention dominates), from a measured row (Cora's)."""
    n0, n = NODE_COUNTS[measured["dataset"]], NODE_COUNTS[ds]
    base = 600.0  # MB: interpreter, torch, the dataset (a GCN-example process on Cora peaks near this)
    need = base + (measured["peak_rss_mb"] - base) * (n / n0) ** 2
    return {"status": "not run", "needs_gb": need / 1024.0,
            "reason": f"needs ~{need / 1024:.0f} GB: {measured['dataset']}'s measured {measured['peak_rss_mb'] / 1024:.1f} GB "
                      f"peak scaled by (N / {n0})^2 = {(n / n0) ** 2:.1f}x above a {base / 1024:.1f} GB base"}


def cmd_run(args: argparse.Namespace) -> int:
    args.out_dir.mkdir(parents=True, exist_ok=True)
    logs = args.out_dir / "logs"
    logs.mkdir(exist_ok=True)
    ds = args.dataset
    epochs, probes, skips = parse_pairs(args.peer_epochs), parse_pairs(args.probe), parse_pairs(args.skip)
    mine = f"xmask-{label(args.xmask_preset)}" if args.xmask_preset else "xmask"  # another preset: a row of its own
    sides = ([] if args.no_xmask else [mine]) + [p for p in args.peers.split(",") if p]
    for side in sides:
        dest = args.out_dir / f"{ds}-{side}.json"
        if dest.exists() and not args.overwrite:
            print(f"{dest.name}: kept (--overwrite reruns it)", file=sys.stderr)
            continue
        print(f"{ds} {side} ...", file=sys.stderr, flush=True)
        if side in skips:
            src = args.out_dir / f"{skips[side]}-{side}.json"
            row = gps_memory_estimate({**json.loads(src.read_text()), "dataset": skips[side]}, ds)
        elif side == mine:
            row = run_xmask(ds, args.seeds, args.data_root, args.cache, args.xmask_epochs, logs,
                            args.out_dir / "prepare" / f"{ds}.json", preset=args.xmask_preset)
            if args.xmask_probe and row["status"] == "ok":  # a few epochs: time and memory only
                row["status"], row["probe"] = "probe", args.xmask_epochs
        else:
            row = run_peer(ds, side, args.seeds, args.data_root, int(epochs[side]) if side in epochs else None,
                           int(probes.get(side, 0)), logs)
        row.update({"dataset": ds, "side": side, "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())})
        tmp = dest.with_suffix(".tmp")
        tmp.write_text(json.dumps(row, indent=2) + "\n")
        tmp.replace(dest)
        print(f"{ds} {side}: {row['status']} {fmt_score(row)} s/epoch {fmt(row.get('seconds_per_epoch'), 3)} "
              f"peak {fmt(row.get('peak_rss_mb'), 0)} MB", file=sys.stderr, flush=True)
    return 0


def fmt(v: float | None, digits: int) -> str:
    return "–" if v is None else f"{v:,.{digits}f}"


def fmt_score(row: dict[str, Any]) -> str:
    t = row.get("test")
    if row["status"] in ("not run", "failed") or t is None:
        return row["status"]
    scale = 100.0
    seeds = row.get("seeds") or []
    return f"{t['mean'] * scale:.1f} ± {t['std'] * scale:.1f} ({len(seeds)} seed{'s' if len(seeds) != 1 else ''})"


def table(rows: list[dict[str, Any]]) -> str:
    """The markdown table: one line per (dataset, side)."""
    head = ["dataset", "model", "test (mean ± std)", "budget (epochs / patience; run)", "precompute s",
            "cache MB", "peak RSS MB", "s / epoch", "params", "note"]
    lines = ["| " + " | ".join(head) + " |", "|---|---|---|---|---:|---:|---:|---:|---:|---|"]
    order = {d: i for i, d in enumerate(NODE_SETS + GRAPH_SETS)}
    def rank(side: str) -> float:  # another xmask preset's row right after xmask's own
        return SIDES.index(side) if side in SIDES else 0.5 if side.startswith("xmask-") else 99

    rows = sorted(rows, key=lambda r: (order.get(r["dataset"], 99), rank(r["side"])))
    for r in rows:
        b = r.get("budget") or {}
        run = f"{r['epochs_run_mean']:.0f}" if r.get("epochs_run_mean") is not None else "–"
        budget = f"{b.get('epochs', '–')} / {b.get('patience', '–')}; {run}" if b else "–"
        pre = r.get("prepare_seconds", r.get("precompute_seconds"))
        note = r.get("note") or r.get("reason") or ""
        whole = r.get("whole_epochs")  # the alternated whole-epoch timing (peers_epochs.py) replaces a probe's
        if r["status"] == "probe" and whole:
            r = {**r, "seconds_per_epoch": whole["median_s"], "peak_rss_mb": whole["peak_rss_mb"]}
            note = (note + "; " if note else "") + whole["note"]
        elif r["status"] == "probe":
            unit = "batches" if r["dataset"] in GRAPH_SETS and not r["side"].startswith("xmask") else "epochs"
            note = (note + "; " if note else "") + f"probe: {r.get('probe')} {unit} timed"
        if r["status"] == "probe":
            if r.get("seconds_per_epoch") and b.get("epochs"):
                hours = r["seconds_per_epoch"] * b["epochs"] / 3600
                note += f"; the full budget ≈ {hours:.1f} h a seed" if hours >= 0.1 else ""
        score = "probe only" if r["status"] == "probe" else fmt_score(r)
        lines.append("| " + " | ".join([
            r["dataset"], r["side"], score, budget, fmt(pre, 1), fmt(r.get("cache_mb"), 1),
            fmt(r.get("peak_rss_mb"), 0), fmt(r.get("seconds_per_epoch"), 3),
            fmt(r.get("params"), 0), note]) + " |")
    return "\n".join(lines)


def cmd_table(args: argparse.Namespace) -> int:
    rows = [json.loads(p.read_text()) for p in sorted(args.out_dir.glob("*.json"))]
    notes = parse_pairs(args.note)
    import peers_epochs  # the whole-epoch rounds it wrote

    whole = peers_epochs.whole_epochs(args.out_dir / "epochs")
    for r in rows:
        key = f"{r['dataset']}/{r['side']}"
        if key in notes:
            r["note"] = notes[key]
        if r["status"] == "probe":
            r["whole_epochs"] = whole.get((r["dataset"], r["side"]))
    text = table(rows)
    (args.out_dir / "table.md").write_text(text + "\n")
    (args.out_dir.parent / "transformers.json").write_text(json.dumps(
        [{k: v for k, v in r.items() if k not in ("runs", "child", "prepare", "train")} for r in rows], indent=2)
        + "\n")
    print(text)
    return 0


def cmd_prepare(args: argparse.Namespace) -> int:
    """Time ``xmask prepare`` on an empty cache entry (the figure the table shows; ``run`` then finds it cached)."""
    dest = args.out_dir / "prepare" / f"{args.dataset}.json"
    dest.parent.mkdir(parents=True, exist_ok=True)
    (args.out_dir / "logs").mkdir(exist_ok=True)
    res = run_prepare(args.dataset, args.data_root, args.cache, args.out_dir / "logs")
    if res.get("cached"):
        print(f"error: {args.dataset} is already in {args.cache}: clear it to time prepare", file=sys.stderr)
        return 2
    dest.write_text(json.dumps(res, indent=2) + "\n")
    print(f"{args.dataset}: prepare {res.get('seconds')} s, {res.get('size_bytes', 0) / 1e6:.1f} MB, peak "
          f"{res.get('child', {}).get('peak_rss_mb', 0):.0f} MB", file=sys.stderr)
    return 0 if res["status"] == "ok" else 1


def cmd_speed(args: argparse.Namespace) -> int:
    """Alternate ``--rounds`` rounds of xmask (its preset, ``--epochs`` epochs, seed 0) and one peer (a probe of
    as many epochs) on a dataset; the median over rounds of each side's median epoch, and their ratio per round."""
    args.out_dir.mkdir(parents=True, exist_ok=True)
    logs = args.out_dir / "logs"
    logs.mkdir(exist_ok=True)
    rounds = []
    for i in range(args.rounds):
        def mine() -> dict[str, Any]:
            return run_xmask(args.dataset, "0", args.data_root, args.cache, args.epochs, logs, preset=args.preset)

        def theirs() -> dict[str, Any]:
            return run_peer(args.dataset, args.peer, "0", args.data_root, None, args.epochs, logs)

        if i % 2 == 0:  # xmask first on even rounds, the peer first on odd ones: load falls on both alike
            x, peer = mine(), theirs()
        else:
            peer, x = theirs(), mine()
        rounds.append({"round": i, "xmask_s_per_epoch": x.get("seconds_per_epoch"),
                       "peer_s_per_epoch": peer.get("seconds_per_epoch"), "xmask_peak_rss_mb": x.get("peak_rss_mb"),
                       "peer_peak_rss_mb": peer.get("peak_rss_mb"), "load": x["train"]["load_before"]
                       if "train" in x else None})
        print(json.dumps(rounds[-1]), file=sys.stderr, flush=True)
    ratio = [r["xmask_s_per_epoch"] / r["peer_s_per_epoch"] for r in rounds]
    res = {"dataset": args.dataset, "preset": args.preset or args.dataset.lower(), "peer": args.peer,
           "epochs": args.epochs, "rounds": rounds,
           "xmask_s_per_epoch": float(np.median([r["xmask_s_per_epoch"] for r in rounds])),
           "peer_s_per_epoch": float(np.median([r["peer_s_per_epoch"] for r in rounds])),
           "ratio_median": float(np.median(ratio)), "ratios": ratio,
           "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    own = f"-{label(args.preset)}" if args.preset else ""
    dest = args.out_dir / "speed" / f"{args.dataset}-xmask{own}-vs-{args.peer}.json"
    dest.parent.mkdir(exist_ok=True)
    dest.write_text(json.dumps(res, indent=2) + "\n")
    print(json.dumps({k: v for k, v in res.items() if k != "rounds"}))
    return 0



def _paths(p: argparse.ArgumentParser) -> None:
    """``--data-root``, ``--cache`` and ``--out-dir``: the subcommands that prepare or train share them."""
    p.add_argument("--data-root", type=Path, default=Path(os.environ.get("XMASK_DATA_ROOT")
                                                          or REPO.parent / "shared" / "datasets"))
    p.add_argument("--cache", type=Path, default=Path(os.environ.get("XMASK_CACHE") or "/tmp/xmask-table-cache"))
    p.add_argument("--out-dir", type=Path, default=OUT)

def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="run xmask and the peers on one dataset (one child process per side)")
    r.add_argument("dataset", choices=NODE_SETS + GRAPH_SETS)
    r.add_argument("--seeds", default="0-2", help="default: %(default)s")
    r.add_argument("--peers", default="", help="comma-separated peers.py names (GCN-example, GAT-example, SGFormer, "
                                               "Polynormer, GPS; GIN, GPS on graph sets)")
    r.add_argument("--peer-epochs", action="append", default=[], metavar="NAME=E",
                   help="cut a peer's epoch budget (default: the xmask preset's train.epochs)")
    r.add_argument("--xmask-epochs", type=int, default=None, help="cut xmask's train.epochs")
    r.add_argument("--xmask-preset", default=None,
                   help="train this preset instead of the dataset's own; its row is xmask-<preset>")
    r.add_argument("--xmask-probe", action="store_true",
                   help="with --xmask-epochs: a timing run (the table shows no accuracy for it)")
    r.add_argument("--probe", action="append", default=[], metavar="NAME=K",
                   help="time K epochs (graph GPS: K batches) of a peer instead of training it")
    r.add_argument("--skip", action="append", default=[], metavar="NAME=MEASURED_DATASET",
                   help="do not start NAME: estimate its memory from the row measured on MEASURED_DATASET")
    r.add_argument("--no-xmask", action="store_true")
    r.add_argument("--overwrite", action="store_true")
    _paths(r)
    pp = sub.add_parser("prepare", help="time xmask prepare of one dataset into --cache")
    pp.add_argument("dataset", choices=NODE_SETS + GRAPH_SETS)
    _paths(pp)
    sp = sub.add_parser("speed", help="alternate xmask and one peer, epoch time only (seed 0)")
    sp.add_argument("dataset", choices=NODE_SETS + GRAPH_SETS)
    sp.add_argument("--peer", required=True)
    sp.add_argument("--epochs", type=int, default=10)
    sp.add_argument("--rounds", type=int, default=3)
    sp.add_argument("--preset", default=None, help="xmask's preset (default: the dataset's own)")
    sp.add_argument("--data-root", type=Path, default=Path(os.environ.get("XMASK_DATA_ROOT")
                                                               or REPO.parent / "shared" / "datasets"))
    sp.add_argument("--cache", type=Path, default=Path(os.environ.get("XMASK_CACHE") or "/tmp/xmask-table-cache"))
    sp.add_argument("--out-dir", type=Path, default=OUT)
    t = sub.add_parser("table", help="the markdown table of the rows in --out-dir")
    t.add_argument("--out-dir", type=Path, default=OUT)
    t.add_argument("--note", action="append", default=[], metavar="DATASET/SIDE=TEXT")
    args = p.parse_args(argv)
    sys.path.insert(0, str(HERE))
    return {"run": cmd_run, "prepare": cmd_prepare, "speed": cmd_speed, "table": cmd_table}[args.cmd](args)


if __name__ == "__main__":
    sys.exit(main())
