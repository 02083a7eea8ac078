#!/usr/bin/env python
"""Tuned X-LogSMask vs tuned PyG peer vs hand preset, with one search code and one budget per side.

What is measured, per dataset: the test metric (mean ± population std over
``--final-seeds``) of

* ``hand``: the shipped preset as it is, trained on the final seeds;
* ``X-LogSMask tuned``: ``xmask tune``'s library call (:func:`xmask_cli.tune.study.run_study`) over
  the preset's ``tune:`` space, ``--trials`` trials x ``--seeds`` seeds, then the best
  configuration on the final seeds;
* ``<peer> tuned``: the peer of ``benchmarks/peers_gnn.py`` (GIN for graph sets, GCN and GAT
  for Cora / CiteSeer / Computers, the GCN link encoder for Cora link prediction, its
  decoder searched too) searched by the same loop (:func:`xmask_cli.tune.search.optimize`:
  TPE seeded per trial number, the same trial and seed budget, the same pruner
  setting) over the space below, scored on validation only (the peer runs
  never compute test during the search), then its best on the final seeds.

Both sides run without pruning by default (``--pruner none``): the peers' loops
report no per-epoch values, and an equal budget means equal trials.

Usage (from the repository root; small and CPU-bound: one torch thread)::

    nice -n 10 python benchmarks/tune_study.py --dataset MUTAG --trials 10 --seeds 0-1 --final-seeds 0-9 --threads 1
    python benchmarks/tune_study.py --dataset Cora --trials 40 --seeds 0-2 --final-seeds 0-9   # the full study

Every study, the peers' included, is a SQLite file (``<--work>/runs/<preset>-<side>/study.db``): after a
kill, the same command with ``--resume`` continues each search to ``--trials`` finished trials and keeps
what ``--out`` already holds (the hand preset's runs, a side already finished). ``--set train.epochs=N``
caps both sides' epochs (the peers take the preset's epochs and patience unless ``--peer-epochs``).

Writes ``benchmarks/out/tune_study/<dataset>.json`` (every trial, best configurations, the final
figures) and prints a markdown table; the X-LogSMask study folder (``best.yaml``, ``trials.csv``,
plots, ``study.db``) is ``<--work>/runs/<preset>-xmask/``.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))
sys.path.insert(0, str(HERE))

import numpy as np  # noqa: E402
import peers_common  # noqa: E402
import peers_gnn  # noqa: E402

from xmask_cli.tune.space import Param, suggest  # noqa: E402

#: study name -> (xmask preset, dataset the peers load, peer models)
DATASETS = {"MUTAG": ("mutag", "MUTAG", ("GIN",)), "PROTEINS": ("proteins", "PROTEINS", ("GIN",)),
            "Cora": ("cora", "Cora", ("GCN", "GAT")), "CiteSeer": ("citeseer", "CiteSeer", ("GCN", "GAT")),
            "Computers": ("computers", "Computers", ("GCN", "GAT")),
            "Cora-link": ("cora-link", "Cora", ("GCN-link",))}

#: The peers' search spaces: the ranges of the xmask level presets where a key means the same.
PEER_SPACES = {
    "GIN": [Param("hidden", "choice", choices=(32, 64, 128)), Param("layers", "int", low=1, high=4),
            Param("dropout", "float", low=0.0, high=0.5, step=0.1),
            Param("lr", "float", low=1e-4, high=1e-2, log=True),
            Param("weight_decay", "float", low=1e-5, high=1e-1, log=True),
            Param("batch_size", "choice", choices=(16, 32, 64))],
    "GCN": [Param("hidden", "choice", choices=(32, 64, 128)), Param("dropout", "float", low=0.2, high=0.7, step=0.1),
            Param("lr", "float", low=1e-3, high=2e-2, log=True),
            Param("weight_decay", "float", low=5e-4, high=2e-1, log=True)],
    "GAT": [Param("hidden", "choice", choices=(4, 8, 16)), Param("dropout", "float", low=0.2, high=0.7, step=0.1),
            Param("lr", "float", low=1e-3, high=2e-2, log=True),
            Param("weight_decay", "float", low=5e-4, high=2e-1, log=True)],
    # The link preset's ranges (link-level.yaml) where a key means the same; hidden is the first GCN layer
    # (the second has hidden / 2), the decoder is the peer's own choice (peers.py's two link rows).
    "GCN-link": [Param("hidden", "choice", choices=(64, 128, 256)), Param("dropout", "float", low=0.0, high=0.5, step=0.1),
                 Param("lr", "float", low=1e-3, high=1e-2, log=True),
                 Param("weight_decay", "float", low=1e-5, high=1e-2, log=True),
                 Param("decoder", "choice", choices=("dot", "mlp"))],
}


def _stats(values: list[float]) -> dict[str, Any]:
    a = np.asarray(values, dtype=np.float64)
    return {"mean": float(a.mean()), "std": float(a.std()), "values": [float(v) for v in values]}


def peer_runner(model: str, dataset: str, data_root: Path, cache_dir: Path, epochs: int, patience: int):
    """``run(seed, hp, parts) -> metrics`` for one peer on one dataset (data loaded once)."""
    graphs = peers_common.load(dataset, data_root, cache_dir)
    if model == "GIN":
        data_list = peers_common.graph_data_list(graphs)
        return lambda seed, hp, parts: peers_gnn.run_graph(graphs, data_list, seed, epochs, patience, hp=hp,
                                                       parts=parts)["metrics"]
    if model == "GCN-link":  # run_link scores only val and test: the search asks val alone
        return lambda seed, hp, parts: peers_gnn.run_link(graphs, "dot", seed, epochs, patience, hp=hp,
                                                      parts=tuple(p for p in parts if p != "train"))["metrics"]
    return lambda seed, hp, parts: peers_gnn.run_node(graphs, model, seed, epochs, patience, hp=hp, parts=parts)["metrics"]


def _open_peer_study(folder: Path, name: str, pruner: str, resume: bool, log: Any,
                     fail_stale_trials: bool = True) -> Any:
    """The peer's Optuna study in ``<folder>/study.db`` (SQLite, as ``xmask tune``'s): a killed run resumes."""
    import optuna

    from xmask_cli.tune.folder import folder_lock
    from xmask_cli.tune.pruning import make_pruner
    from xmask_cli.tune.storage import fail_stale, open_storage

    if folder.exists() and not resume:
        import shutil

        shutil.rmtree(folder)
    with folder_lock(folder):  # parallel workers create the SQLite file once
        storage = open_storage(f"sqlite:///{(folder / 'study.db').resolve()}", log=log)
        # stride=1: a peer's objective reports no intermediate values (the pruner never sees a step).
        study = optuna.create_study(study_name=name, storage=storage, direction="maximize",
                                    pruner=make_pruner(pruner, stride=1), load_if_exists=True)
    if resume and fail_stale_trials:
        fail_stale(study)  # trials a killed worker left running (Optuna's heartbeat; optimize repeats it)
    return study


def _complete(study: Any) -> int:
    from optuna.trial import TrialState

    return len(study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)))


def _peer_objective(params: list[Param], run: Any, seeds: list[int]) -> Any:
    def objective(trial: Any) -> float:
        hp = suggest(trial, params)
        trial.set_user_attr("values", hp)
        vals = [run(s, hp, ("train", "val"))["val"] for s in seeds]  # test is never computed here
        trial.set_user_attr("val_values", vals)
        trial.set_user_attr("val_std", float(np.std(vals)))
        return float(np.mean(vals))

    return objective


def _subprocesses(cmds: list[list[str]]) -> list[str]:
    """Run ``cmds`` at once (each one torch thread); their stdout, in order. Any failure stops the study."""
    import subprocess

    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    procs = [subprocess.Popen(c, stdout=subprocess.PIPE, stderr=None, text=True, env=env, cwd=REPO) for c in cmds]
    outs = [p.communicate()[0] for p in procs]
    bad = [(c, p.returncode) for c, p in zip(cmds, procs) if p.returncode != 0]
    if bad:
        raise RuntimeError(f"{len(bad)} peer process(es) failed, e.g. exit {bad[0][1]}: {' '.join(bad[0][0][-6:])}")
    return outs


def tune_peer(model: str, run: Any, args: argparse.Namespace, folder: Path, metric: str, log: Any) -> dict[str, Any]:
    """Search ``model``'s space with xmask tune's loop (same trials, seeds, sampler seeding), then its best on the
    final seeds; the study is ``<folder>/study.db``, continued under ``--resume`` (to ``--trials`` complete
    trials). ``--peer-workers N``: the trials and the final seeds run in N processes of this script at once
    (trial n draws the same values in any process: the sampler is seeded by trial number)."""
    from xmask_cli.tune.search import optimize

    params = PEER_SPACES[model]
    study = _open_peer_study(folder, f"{folder.name}", args.pruner, args.resume, log)
    todo = max(0, args.trials - _complete(study)) if args.resume else args.trials
    me = [sys.executable, str(Path(__file__).resolve()), *sys.argv[1:]]
    if args.peer_workers > 1 and todo > 0:
        n = min(args.peer_workers, todo)
        shares = [todo // n + (i < todo % n) for i in range(n)]
        log(f"[{model}] {todo} trial(s) in {n} processes")
        _subprocesses([[*me, "--peer-worker", model, "--trials", str(k)] for k in shares])
    elif todo > 0:
        optimize(study, _peer_objective(params, run, args.seeds), trials=todo, sampler_seed=args.sampler_seed,
                 metric=metric, log=lambda m: log(f"[{model}] {m}"))
    best = study.best_trial
    if args.peer_workers > 1:
        outs = _subprocesses([[*me, "--peer-final", model, "--peer-seed", str(s)] for s in args.final_seeds])
        final = [json.loads(o.strip().splitlines()[-1]) for o in outs]
    else:
        final = [run(s, best.user_attrs["values"], ("train", "val", "test")) for s in args.final_seeds]
    for s, m in zip(args.final_seeds, final):
        log(f"[{model}] final seed {s}: val {m['val']:.4f} test {m['test']:.4f}")
    return {"best": {"number": best.number, "value": best.value, "params": best.user_attrs["values"]},
            "trials": [{"number": t.number, "state": t.state.name, "value": t.value, "params": t.user_attrs.get("values")}
                       for t in study.trials],
            "final": {p: _stats([m[p] for m in final]) for p in ("val", "test")}}


def peer_process(args: argparse.Namespace, cfg: Any, data_name: str, metric: str, log: Any) -> int:
    """``--peer-worker MODEL`` (run ``--trials`` trials on the peer's study) or ``--peer-final MODEL --peer-seed s``
    (train the study's best on seed ``s``, print its val / test as one JSON line)."""
    from xmask_cli.tune.search import optimize

    model = args.peer_worker or args.peer_final
    preset = DATASETS[args.dataset][0]
    folder = args.work / "runs" / f"{preset}-{model}"
    run = peer_runner(model, data_name, args.data_root, args.work / "cache", args.peer_epochs or cfg.train.epochs,
                      cfg.train.patience)
    study = _open_peer_study(folder, folder.name, args.pruner, True, log, fail_stale_trials=False)
    if args.peer_worker:
        optimize(study, _peer_objective(PEER_SPACES[model], run, args.seeds), trials=args.trials,
                 sampler_seed=args.sampler_seed, metric=metric, log=lambda m: log(f"[{model}] {m}"))
        return 0
    m = run(args.peer_seed, study.best_trial.user_attrs["values"], ("train", "val", "test"))
    print(json.dumps({k: float(v) for k, v in m.items()}), flush=True)
    return 0


#: Paper 000's figures (test-selected: its search scored trials on the test set), X-LogSMask 2-layer / 1-layer and
#: the peer row, with the table they come from.
PAPER = {"MUTAG": ("88.89 / 88.89", "GIN 84.50", "Table 6"), "PROTEINS": ("80.63 / 75.68", "GIN 73.76", "Table 6"),
         "Cora": ("82.70 / 80.80", "GCN 81.60, GAT 83.00", "Table 3"),
         "CiteSeer": ("71.70 / 71.00", "GCN 71.60, GAT 72.50", "Table 3"),
         "Computers": ("92.01 / 91.21", "GCN 89.65, GAT 90.78", "Table 3"),
         "Cora-link": ("59.9 / 59.9", "GCN 32.50", "Table 5")}


def _cell(r: dict[str, Any] | None) -> str:
    return "—" if not r else f"{100 * r['mean']:.2f} ± {100 * r['std']:.2f}"


def report(paths: list[Path]) -> str:
    """Markdown: one table per study JSON (val and test over the final seeds, search score, best config, time)."""
    out = []
    for path in paths:
        r = json.loads(path.read_text())
        ds, meta, b = r["dataset"], r["meta"], r["meta"]["budget"]
        scale = "%" if r.get("metric", "accuracy") == "accuracy" else "× 100"
        out.append(f"**{ds}** ({r.get('metric', 'accuracy')} {scale}; {b['trials']} trials × seeds "
                   f"{','.join(map(str, b['seeds']))} per side, final seeds {b['final_seeds'][0]}-{b['final_seeds'][-1]}, "
                   + (f"epochs {b['epochs']} / patience {b['patience']}" if "epochs" in b else "the preset's epochs")
                   + (f", overrides {' '.join(b['overrides'])}" if b.get("overrides") else "") + ")\n")
        out.append("| model | search val (best trial) | val | test | best configuration |")
        out.append("|---|---:|---:|---:|---|")
        hand = r.get("hand")
        if hand:
            src = " (results.py runs, not re-run)" if hand.get("source") else ""
            out.append(f"| X-LogSMask, hand preset{src} | | {_cell(hand['val'])} | {_cell(hand['test'])} | |")
        sides = [("X-LogSMask, tuned", r.get("xmask"))] + [(f"{m} (peers.py), tuned", r[m]) for m in PEER_SPACES if m in r]
        for name, side in sides:
            if not side:
                continue
            best = side["best"]
            params = best.get("params") or best.get("values") or {}
            shown = ", ".join(f"{k} {v:.3g}" if isinstance(v, float) else f"{k} {v}" for k, v in params.items())
            out.append(f"| {name} | {100 * best['value']:.2f} (#{best['number']}) | {_cell(side['final']['val'])} | "
                       f"{_cell(side['final']['test'])} | {shown} |")
        if ds in PAPER:
            x, peer, table = PAPER[ds]
            out.append(f"| paper 000 {table} (test-selected) | | | X-LogSMask {x}; {peer} | |")
        loads = [s[0] for s in meta.get("load_samples", [])] + [meta["load_average_start"][0], meta.get("load_average_end", [0.0])[0]]
        end = (_dt.datetime.fromisoformat(meta["last_written"]) if meta.get("last_written")
               else _dt.datetime.fromtimestamp(path.stat().st_mtime, _dt.timezone.utc))
        wall = (end - _dt.datetime.fromisoformat(meta["date"])).total_seconds() / 60
        out.append(f"\nLoad average (1 min) sampled over the run: {min(loads):.1f}-{max(loads):.1f} on {meta['cpu_count']} "
                   f"cores; started {meta['date'][11:16]}, last written {end.isoformat()[11:16]} UTC ({wall:.0f} min wall, "
                   f"all sides)" + (f"; resumed at {', '.join(t[11:16] for t in meta['resumed'])}" if meta.get("resumed")
                                   else "") + ".\n")
    return "\n".join(out)


def parallel_final(best_yaml: Path | str, seeds: list[int], workers: int, root: Path, cache: Path, data_root: Path,
                   log: Any, overrides: list[str] = (), name: str = "final") -> dict[str, Any]:
    """Train a preset (``best.yaml``, or the hand preset with ``overrides``) on ``seeds`` as ``workers`` parallel
    ``xmask train`` processes (one seed each, the function ``run_study``'s final calls seed by seed); val and
    test mean ± population std."""
    import subprocess
    from concurrent.futures import ThreadPoolExecutor

    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}

    def one(seed: int) -> dict[str, Any]:
        cmd = [sys.executable, "-m", "xmask_cli", "--format", "json", "train", "--preset", str(best_yaml),
               "--seed", str(seed), "--cache-dir", str(cache), "--data-root", str(data_root), "--offline",
               "--overwrite", "--device", "cpu", "--set", f"run.root={root}", "--set", f"run.name={name}",
               *(a for o in overrides for a in ("--set", o))]
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=REPO)
        if proc.returncode != 0:
            raise RuntimeError(f"final seed {seed}: exit {proc.returncode}: {proc.stderr.strip().splitlines()[-1:]}")
        run = json.loads(proc.stdout)["runs"][0]
        log(f"{name} seed {seed}: val {run['metrics']['val']:.4f} test {run['metrics']['test']:.4f} "
            f"(best epoch {run['best_epoch']})")
        return run

    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        runs = list(pool.map(one, seeds))
    return {"seeds": seeds, "workers": workers, "best_epochs": [r["best_epoch"] for r in runs],
            **{p: _stats([r["metrics"][p] for r in runs]) for p in ("val", "test")}}


def main(argv: list[str] | None = None) -> int:
    if argv is None and sys.argv[1:2] == ["--report"] or argv and argv[:1] == ["--report"]:
        print(report([Path(a) for a in (argv or sys.argv[1:])[1:]]))
        return 0
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--dataset", choices=list(DATASETS), default="MUTAG")
    p.add_argument("--trials", type=int, default=10)
    p.add_argument("--seeds", type=peers_common.parse_seeds, default=[0, 1])
    p.add_argument("--final-seeds", type=peers_common.parse_seeds, default=list(range(10)))
    p.add_argument("--sampler-seed", type=int, default=0)
    p.add_argument("--pruner", choices=("none", "median"), default="none")
    p.add_argument("--peer-epochs", type=int, default=None, help="peer epoch budget (default: the preset's train.epochs)")
    p.add_argument("--peers", default=None, help="comma-separated subset of the dataset's peers (default: all)")
    p.add_argument("--data-root", type=Path, default=peers_common.DEFAULT_DATA_ROOT)
    p.add_argument("--work", type=Path, default=REPO / "runs" / "tune_study",
                   help="studies, runs and cache (default: %(default)s, ignored by git)")
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--skip-hand", action="store_true", help="do not train the hand preset on the final seeds")
    p.add_argument("--hand-from", type=Path, default=None,
                   help="take the hand preset's figures from a results.py JSON (its entry for the preset, which must "
                        "cover exactly --final-seeds with no overrides) instead of training them again")
    p.add_argument("--resume", action="store_true",
                   help="continue a killed run: the SQLite studies (xmask's and the peers') go on to --trials "
                        "finished trials, and the parts already in --out (hand, a side's final) are kept")
    p.add_argument("--peer-workers", type=int, default=1,
                   help="run each peer's trials and final seeds in this many processes at once (default: 1)")
    p.add_argument("--peer-worker", default=None, help=argparse.SUPPRESS)
    p.add_argument("--peer-final", default=None, help=argparse.SUPPRESS)
    p.add_argument("--peer-seed", type=int, default=None, help=argparse.SUPPRESS)
    p.add_argument("--hand-workers", type=int, default=1,
                   help="train the hand preset's final seeds as this many parallel processes (default: 1, in-process)")
    p.add_argument("--final-workers", type=int, default=1,
                   help="train the tuned X-LogSMask's final seeds as this many parallel processes (default: 1, "
                        "in-process after the search)")
    p.add_argument("--set", dest="overrides", action="append", default=[],
                   help="xmask override for the hand preset and the search (e.g. train.epochs=50); repeatable")
    p.add_argument("--out", type=Path, default=None)
    args = p.parse_args(argv)

    import torch

    from xmask_cli import config_resolve as R
    from xmask_cli.engine.runs.experiment import check_config
    from xmask_cli.engine.runs.sweep import train_seeds
    from xmask_cli.tune.study import TuneOptions, run_study

    if args.threads:
        torch.set_num_threads(args.threads)
    log = lambda m: print(m, file=sys.stderr, flush=True)  # noqa: E731
    preset, data_name, peer_models = DATASETS[args.dataset]
    if args.peers:
        peer_models = tuple(m.strip() for m in args.peers.split(",") if m.strip())
        bad = [m for m in peer_models if m not in DATASETS[args.dataset][2]]
        if bad:
            p.error(f"--peers: {bad} not peers of {args.dataset} ({', '.join(DATASETS[args.dataset][2])})")
    base = [f"data.root={args.data_root}", *args.overrides]
    cfg = R.resolve(preset, base)
    _, metric = check_config(cfg)
    if args.peer_worker or args.peer_final:
        return peer_process(args, cfg, data_name, metric, log)
    cache = args.work / "cache"
    out = args.out or HERE / "out" / "tune_study" / f"{args.dataset}.json"
    budget = {"trials": args.trials, "seeds": args.seeds, "final_seeds": args.final_seeds, "pruner": args.pruner,
              "sampler_seed": args.sampler_seed, "overrides": args.overrides,
              "epochs": cfg.train.epochs, "patience": cfg.train.patience, "peer_epochs": args.peer_epochs or cfg.train.epochs}
    result: dict[str, Any] = {}
    if args.resume and out.exists():
        result = json.loads(out.read_text())
        saved = dict(result.get("meta", {}).get("budget") or {})
        # --trials may change on resume: trial n draws the same values whatever the total (the sampler is seeded
        # by trial number), so a study cut short at n trials is the n-trial study; the budget records the last.
        if {k: v for k, v in saved.items() if k != "trials"} != {k: v for k, v in budget.items() if k != "trials"}:
            p.error(f"--resume: {out} was made with another budget ({saved}); use the same options, or no --resume")
        result["meta"]["budget"] = budget
        result["meta"].setdefault("resumed", []).append(_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"))
    else:
        result = {"meta": {"date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
                           "python": platform.python_version(), "torch": torch.__version__,
                           "threads": torch.get_num_threads(), "cpu_count": os.cpu_count(),
                           "load_average_start": list(os.getloadavg()),
                           "command": " ".join([Path(sys.executable).name, *sys.argv]), "budget": budget},
                  "dataset": args.dataset, "metric": metric}
    meta = result["meta"]
    loads: list[list[float]] = meta.setdefault("load_samples", [])

    def save() -> None:
        meta["load_average_end"] = list(os.getloadavg())
        meta["last_written"] = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
        loads.append(list(os.getloadavg()))
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = out.with_name(out.name + ".tmp")
        tmp.write_text(json.dumps(result, indent=2, default=str) + "\n")
        os.replace(tmp, out)

    if args.hand_from is not None and "hand" not in result:
        entry = json.loads(args.hand_from.read_text()).get(preset)
        if not entry or entry.get("seeds") != args.final_seeds or entry.get("overrides") or args.overrides:
            p.error(f"--hand-from {args.hand_from}: no '{preset}' entry run on seeds {args.final_seeds} without "
                    f"overrides (and this study must have none)")
        result["hand"] = {**{k: entry["aggregate"][k] for k in ("val", "test")}, "seconds": entry.get("seconds"),
                          "source": f"{args.hand_from} ['{preset}'] (not re-run)"}
        save()
    if not args.skip_hand and "hand" not in result and args.hand_workers > 1:
        t0 = time.monotonic()
        hand = parallel_final(preset, args.final_seeds, args.hand_workers, args.work / "runs" / args.dataset, cache,
                              args.data_root, log, overrides=args.overrides, name="hand")
        result["hand"] = {"val": hand["val"], "test": hand["test"], "seconds": time.monotonic() - t0,
                          "workers": args.hand_workers}
        save()
    if not args.skip_hand and "hand" not in result:
        t0 = time.monotonic()
        hand = train_seeds(R.resolve(preset, [*base, "run.name=hand"]), args.final_seeds,
                           cache_dir=cache, run_root=args.work / "runs" / args.dataset, overwrite=True, offline=True,
                           log=log)
        result["hand"] = {**{p: hand["aggregate"][p] for p in ("val", "test")}, "seconds": time.monotonic() - t0}
        save()
    if "xmask" not in result:
        t0 = time.monotonic()
        in_process = args.final_workers <= 1
        opts = TuneOptions(trials=args.trials, seeds=args.seeds, final_seeds=args.final_seeds if in_process else [],
                           study=f"{preset}-xmask",
                           runs_dir=args.work / "runs", sampler_seed=args.sampler_seed, pruner=args.pruner,
                           cache_dir=cache, offline=True, resume=args.resume)
        study_dir = args.work / "runs" / opts.study
        if study_dir.exists() and not args.resume:  # a fresh study each time: the budget is the stated one
            import shutil

            shutil.rmtree(study_dir)
        xm = run_study(cfg, opts, log=log)
        if in_process:
            final = {p: xm["final"][p] for p in ("val", "test")}
        else:
            final = parallel_final(study_dir / "best.yaml", args.final_seeds, args.final_workers, study_dir / "final-par",
                                   cache, args.data_root, log)
        result["xmask"] = {"best": xm["best"], "final": final, "trials": xm["trials"],
                           "seconds": time.monotonic() - t0, "study_dir": str(study_dir)}
        save()
    # Equal budget: the peer runs as many trials as X-LogSMask completed (a trial a killed process left
    # running is recorded failed at --resume and not counted).
    peer_trials = int(result["xmask"]["trials"].get("complete", args.trials))
    result["meta"]["peer_trials"] = peer_trials
    args.trials = peer_trials
    epochs = args.peer_epochs or cfg.train.epochs
    for model in peer_models:
        if model in result:
            continue
        t1 = time.monotonic()
        run = peer_runner(model, data_name, args.data_root, cache, epochs, cfg.train.patience)
        folder = args.work / "runs" / f"{preset}-{model}"
        result[model] = {**tune_peer(model, run, args, folder, metric, log), "epochs": epochs,
                         "patience": cfg.train.patience, "seconds": time.monotonic() - t1}
        save()

    rows = [("hand preset", result.get("hand")), ("X-LogSMask tuned", result["xmask"]["final"]),
            *((f"{m} tuned", result[m]["final"]) for m in peer_models)]
    print(f"| {args.dataset} | val {metric} | test {metric} |\n|---|---:|---:|")
    for name, r in rows:
        if r:
            print(f"| {name} | {100 * r['val']['mean']:.2f} ± {100 * r['val']['std']:.2f} | "
                  f"{100 * r['test']['mean']:.2f} ± {100 * r['test']['std']:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
