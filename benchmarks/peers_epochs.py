#!/usr/bin/env python
"""Whole epochs of xmask and its peers, alternated in one run: the timing of the rows too slow to train.

For one dataset, each round runs xmask (its preset, ``--epochs`` whole epochs, seed 0) and every peer of
``--peers`` (``peers.py --probe-epochs``: the same number of whole training epochs, no evaluation), each a
child process at one thread (``OMP_NUM_THREADS=1``, ``peers.py --threads 1``), xmask first on even rounds and
last on odd ones, so the machine's load falls on both sides alike. Nothing is extrapolated from a part of an
epoch. A child still running at ``--limit-s`` wall seconds is stopped, and its row keeps what it reached (the
last ``progress:`` line of its log: epoch, batches done of the epoch's, seconds into it), the seconds it ran
and its peak RSS. Per child: each epoch's training seconds (xmask: ``train_s`` of ``metrics.jsonl``; a peer:
forward, backward and step, as ``peers.py`` times them), the child's wall seconds, peak RSS (``ru_maxrss``)
and the 1-minute load average before and after.

Usage (from the repository root)::

    python benchmarks/peers_epochs.py run PROTEINS --peers GPS --epochs 1 --rounds 2 --limit-s 1200
    python benchmarks/peers_epochs.py run Physics --peers GCN-example,GAT-example,SGFormer,Polynormer --epochs 2
    python benchmarks/peers_epochs.py table          # markdown of benchmarks/out/transformers/epochs/*.json

One JSON per dataset in ``--out-dir`` (default ``benchmarks/out/transformers/epochs``).
"""
from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import transformers_table as tt  # noqa: E402

OUT = tt.OUT / "epochs"
_PROGRESS = re.compile(r"progress: epoch (\d+) batch (\d+)/(\d+) ([0-9.]+) s")


def run_limited(cmd: list[str], env: dict[str, str], log: Path, limit_s: float) -> dict[str, Any]:
    """Run ``cmd`` (stdout and stderr to ``log``) for at most ``limit_s`` wall seconds; its exit code, wall
    seconds, peak RSS (MB), whether it was stopped at the limit, and the load averages around it."""
    load0 = list(os.getloadavg())
    t = time.perf_counter()
    with open(log, "w") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env={**os.environ, **env},
                                cwd=str(tt.REPO))
        stopped = False
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if time.perf_counter() - t > limit_s and not stopped:
                proc.send_signal(signal.SIGTERM)
                stopped = True
            time.sleep(0.5)
    return {"cmd": " ".join(cmd), "rc": os.waitstatus_to_exitcode(status), "wall_s": time.perf_counter() - t,
            "peak_rss_mb": usage.ru_maxrss / 1024.0, "stopped_at_limit": stopped, "limit_s": limit_s,
            "load_before": load0, "load_after": list(os.getloadavg())}


def reached(log: Path) -> dict[str, Any] | None:
    """The last ``progress:`` line of a peer's log: how far its epochs got (None: it printed none)."""
    last = None
    for line in log.read_text(errors="replace").splitlines():
        m = _PROGRESS.search(line)
        if m:
            last = m
    if last is None:
        return None
    e, b, n, s = last.groups()
    return {"epoch": int(e), "batches_done": int(b), "batches_per_epoch": int(n), "seconds_into_epoch": float(s)}


def xmask_side(ds: str, preset: str, epochs: int, args: argparse.Namespace, log: Path) -> dict[str, Any]:
    """``xmask train --preset <preset> --seeds 0 --set train.epochs=<epochs>`` (cache already filled): each
    epoch's ``train_s`` from ``metrics.jsonl``."""
    runs_dir = Path(tempfile.mkdtemp(prefix=f"xmask-epochs-{preset}-"))
    cmd = [sys.executable, "-m", "xmask_cli", "--format", "json", "train", "--preset", preset, "--seeds", "0",
           "--runs-dir", str(runs_dir), "--set", f"train.epochs={epochs}"]
    env = {**tt._threads_env(), "XMASK_CACHE": str(args.cache), "XMASK_DATA_ROOT": str(args.data_root)}
    child = run_limited(cmd, env, log, args.limit_s)
    metrics = sorted(runs_dir.glob("**/metrics.jsonl"))
    rows = [json.loads(x) for x in metrics[0].read_text().splitlines() if x] if metrics else []
    return {"side": "xmask", "preset": preset, "epoch_seconds": [r["train_s"] for r in rows],
            "epochs_done": len(rows), "child": child}


def peer_side(ds: str, peer: str, epochs: int, args: argparse.Namespace, log: Path) -> dict[str, Any]:
    """``peers.py --probe-epochs <epochs>`` of one peer, seed 0: each whole epoch's training seconds; a run
    stopped at the limit keeps what it reached."""
    out = Path(tempfile.mkstemp(prefix=f"peers-epochs-{ds}-{peer}-", suffix=".json")[1])
    graph = ds in tt.GRAPH_SETS
    cmd = [sys.executable, str(HERE / "peers.py"), "--threads", "1", "--seeds", "0", "--data-root",
           str(args.data_root), "--out", str(out), "--probe-epochs", str(epochs), "--only",
           "graph" if graph else "node", "--graph-datasets" if graph else "--node-datasets", ds,
           "--graph-models" if graph else "--node-models", peer]
    child = run_limited(cmd, tt._threads_env(), log, args.limit_s)
    res: dict[str, Any] = {"side": peer, "epoch_seconds": [], "epochs_done": 0, "child": child}
    if out.exists() and out.stat().st_size:
        run = json.loads(out.read_text())["runs"]
        if run:
            res.update(epoch_seconds=run[0]["epoch_seconds"], epochs_done=len(run[0]["epoch_seconds"]),
                       params=run[0].get("params"), precompute_seconds=run[0].get("precompute_seconds"))
    out.unlink(missing_ok=True)
    if res["epochs_done"] < epochs:
        res["reached"] = reached(log)
    return res


def summarize(rounds: list[list[dict[str, Any]]]) -> dict[str, dict[str, Any]]:
    """Per side over every round: median and range of the whole-epoch seconds, peak RSS range, load range,
    and for an unfinished side what it reached."""
    out: dict[str, dict[str, Any]] = {}
    for r in rounds:
        for side in r:
            s = out.setdefault(side["side"], {"epoch_seconds": [], "first": [], "later": [], "peak_rss_mb": [],
                                              "load": [], "unfinished": []})
            s["epoch_seconds"] += side["epoch_seconds"]
            s["first"] += side["epoch_seconds"][:1]  # warm-up (JIT compiles, caches) lands in a run's first
            s["later"] += side["epoch_seconds"][1:]
            s["peak_rss_mb"].append(side["child"]["peak_rss_mb"])
            s["load"] += [side["child"]["load_before"][0], side["child"]["load_after"][0]]
            if "reached" in side:
                s["unfinished"].append({"reached": side["reached"], "wall_s": side["child"]["wall_s"],
                                        "peak_rss_mb": side["child"]["peak_rss_mb"],
                                        "stopped_at_limit": side["child"]["stopped_at_limit"],
                                        "rc": side["child"]["rc"]})
    for s in out.values():
        for key in ("first", "later"):  # the table's figure: later epochs where runs had them
            e = s[key]
            s[f"{key}_median_s"] = float(np.median(e)) if e else None
            s[f"{key}_range_s"] = [float(min(e)), float(max(e))] if e else None
    return out


def cmd_run(args: argparse.Namespace) -> int:
    ds, preset = args.dataset, args.preset or args.dataset.lower()
    peers = [p for p in args.peers.split(",") if p]
    logs = args.out_dir / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    prep = tt.run_prepare(ds, args.data_root, args.cache, logs, preset)  # fill the cache: not timed here
    if prep["status"] != "ok":
        print(f"error: {prep['reason']}", file=sys.stderr)
        return 1
    rounds: list[list[dict[str, Any]]] = []
    for i in range(args.rounds):
        order = ["xmask", *peers] if i % 2 == 0 else [*peers, "xmask"]
        sides = []
        for side in order:
            log = logs / f"epochs-{ds}-{side}-round{i}.log"
            res = (xmask_side(ds, preset, args.epochs, args, log) if side == "xmask"
                   else peer_side(ds, side, args.epochs, args, log))
            print(f"round {i} {ds} {side}: epochs {[round(x, 2) for x in res['epoch_seconds']]} peak "
                  f"{res['child']['peak_rss_mb']:.0f} MB load {res['child']['load_before'][0]:.1f}"
                  + (f" reached {res.get('reached')}" if "reached" in res else ""), file=sys.stderr, flush=True)
            sides.append(res)
        rounds.append(sides)
        write(args, ds, preset, peers, rounds)
    return 0


def write(args: argparse.Namespace, ds: str, preset: str, peers: list[str], rounds: list[list[Any]]) -> None:
    """The dataset's JSON (every round so far, and the summary), written whole under a temporary name."""
    res = {"dataset": ds, "preset": preset, "peers": peers, "epochs": args.epochs, "rounds_done": len(rounds),
           "limit_s": args.limit_s, "threads": 1, "summary": summarize(rounds), "rounds": rounds,
           "command": " ".join(["python", "benchmarks/peers_epochs.py", *sys.argv[1:]]),
           "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    dest = args.out_dir / f"{ds}.json"
    tmp = dest.with_suffix(".tmp")
    tmp.write_text(json.dumps(res, indent=2) + "\n")
    tmp.replace(dest)


def _cell(s: dict[str, Any], key: str) -> str:
    if s[f"{key}_median_s"] is None:
        return "–"
    lo, hi = s[f"{key}_range_s"]
    return f"{s[f'{key}_median_s']:,.2f} ({lo:,.2f}-{hi:,.2f}; {len(s[key])})"


def table(results: list[dict[str, Any]]) -> str:
    """One line per (dataset, side): a run's first epoch and its later ones (median, range, count), the ratio
    to xmask's (later epochs where both have them, else first), peak RSS, load, and what an unfinished side
    reached."""
    lines = ["| dataset | side | first epoch s, median (range; n) | later epochs s, median (range; n) | / xmask "
             "| peak RSS MB | load (1 min) | note |", "|---|---|---:|---:|---:|---:|---|---|"]
    order = {d: i for i, d in enumerate(tt.NODE_SETS + tt.GRAPH_SETS)}
    for res in sorted(results, key=lambda r: order.get(r["dataset"], 99)):
        summary = summarize(res["rounds"])  # from the raw rounds: a file written by an older summary reads alike
        mine = summary.get("xmask", {})
        for side, s in summary.items():
            key = "later" if s.get("later_median_s") and mine.get("later_median_s") else "first"
            x, y = mine.get(f"{key}_median_s"), s.get(f"{key}_median_s")
            ratio = f"{y / x:,.1f}x ({key})" if x and y and side != "xmask" else ""
            note = "; ".join(
                f"stopped at {u['wall_s']:.0f} s (limit) in epoch {u['reached']['epoch']}: "
                f"{u['reached']['batches_done']} of {u['reached']['batches_per_epoch']} batches in "
                f"{u['reached']['seconds_into_epoch']:.0f} s" if u["reached"] else f"no epoch begun in {u['wall_s']:.0f} s"
                for u in s["unfinished"])
            name = f"xmask `{res['preset']}`" if side == "xmask" else side
            rss = f"{min(s['peak_rss_mb']):,.0f}-{max(s['peak_rss_mb']):,.0f}"
            load = f"{min(s['load']):.1f}-{max(s['load']):.1f}"
            lines.append(f"| {res['dataset']} | {name} | {_cell(s, 'first')} | {_cell(s, 'later')} | {ratio} | "
                         f"{rss} | {load} | {note} |")
    return "\n".join(lines)


def whole_epochs(out_dir: Path) -> dict[tuple[str, str], dict[str, Any]]:
    """``(dataset, side) -> {median_s, peak_rss_mb, note}`` of every run in ``out_dir`` (xmask's side keyed
    ``xmask``): what ``transformers_table.py table`` shows in place of a probe's figures."""
    out = {}
    for path in sorted(out_dir.glob("*.json")):
        res = json.loads(path.read_text())
        for side, s in summarize(res["rounds"]).items():
            key = "later" if s["later_median_s"] else "first"
            n = len(s[key])
            note = (f"{n} whole {'later ' if key == 'later' else ''}epoch{'s' if n != 1 else ''} alternated with "
                    f"{'the peers' if side == 'xmask' else 'xmask'}, load {min(s['load']):.0f}-{max(s['load']):.0f}")
            if s["unfinished"]:
                u = s["unfinished"][0]
                note = (f"no whole epoch within {u['wall_s']:.0f} s at load {min(s['load']):.0f}-{max(s['load']):.0f}"
                        + (f": {u['reached']['batches_done']} of {u['reached']['batches_per_epoch']} batches"
                           if u["reached"] else ""))
            out[(res["dataset"], side)] = {"median_s": s[f"{key}_median_s"], "note": note,
                                           "peak_rss_mb": max(s["peak_rss_mb"])}
    return out


def cmd_table(args: argparse.Namespace) -> int:
    print(table([json.loads(p.read_text()) for p in sorted(args.out_dir.glob("*.json"))]))
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="alternate whole epochs of xmask and the peers on one dataset")
    r.add_argument("dataset", choices=tt.NODE_SETS + tt.GRAPH_SETS)
    r.add_argument("--peers", required=True, help="comma-separated peers.py names")
    r.add_argument("--preset", default=None, help="xmask's preset (default: the dataset's own)")
    r.add_argument("--epochs", type=int, default=1, help="whole epochs per child (default: %(default)s)")
    r.add_argument("--rounds", type=int, default=2, help="default: %(default)s")
    r.add_argument("--limit-s", type=float, default=1200.0, help="wall limit of one child (default: %(default)s)")
    tt._paths(r)
    r.set_defaults(out_dir=OUT)
    t = sub.add_parser("table", help="markdown of the runs in --out-dir")
    t.add_argument("--out-dir", type=Path, default=OUT)
    args = p.parse_args(argv)
    return {"run": cmd_run, "table": cmd_table}[args.cmd](args)


if __name__ == "__main__":
    sys.exit(main())
