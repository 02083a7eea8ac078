"""The ``xmask`` command line: parse -> load config -> call one function -> render.

Results go to stdout (``--format human|json``); logs and progress to stderr.
Errors are one line on stderr and a documented exit code; set ``XMASK_DEBUG=1``
for the traceback.
"""
from __future__ import annotations

import functools
import os
import sys
import traceback
from pathlib import Path
from typing import Annotated, Any, Callable, Optional

import typer

from xmask_cli import __version__
from xmask_cli.console import Output, human_bytes, kv_table
from xmask_cli.errors import EXIT_CODES, UsageError, XmaskError

_EXIT_HELP = "Exit codes: " + "; ".join(f"{k} {v}" for k, v in EXIT_CODES.items()) + "."

_MAIN_HELP = """Structure-aware graph transformers (X-LogSMask) from the command line.

Examples:

    xmask prepare cora

    xmask train --preset graph-level

    xmask train --preset node-level --dataset cora --seeds 0-4 --format json > cora.json

    xmask eval runs/mutag-graph/0

    xmask ablate --preset node-level --dataset cora --seeds 0-4

    xmask tune --preset mutag --trials 40 --seeds 0-2 --final-seeds 0-9

    xmask explain runs/mutag-graph/0 --graph 17

    xmask --format json prepare MUTAG --set structure.powers.k=3

    xmask presets show graph-level

    xmask cache ls

""" + _EXIT_HELP

# typer vendors click in recent versions: take click's exception classes from wherever typer's come from.
_click_exceptions = sys.modules[typer.BadParameter.__module__]


class _OneLineErrors(typer.core.TyperGroup):
    """Option-parser errors (``--bogus``, ``--workers 0``) as one ``error:`` line and exit 2, like every
    other xmask error, instead of click's boxed usage text."""

    def main(self, *args: Any, standalone_mode: bool = True, **kwargs: Any) -> Any:
        if not standalone_mode:
            return super().main(*args, standalone_mode=False, **kwargs)
        try:
            rv = super().main(*args, standalone_mode=False, **kwargs)
        except _click_exceptions.ClickException as exc:
            if isinstance(exc, getattr(_click_exceptions, "NoArgsIsHelpError", ())):
                return super().main(*args, standalone_mode=True, **kwargs)  # bare `xmask cache`: the help
            ctx = getattr(exc, "ctx", None)
            hint = f" (see `{ctx.command_path} --help`)" if ctx is not None else ""
            message = " ".join(line.strip() for line in exc.format_message().splitlines() if line.strip())
            sys.stderr.write(f"error: {message}{hint}\n")
            sys.exit(exc.exit_code)
        except _click_exceptions.Abort:
            sys.stderr.write("error: aborted\n")
            sys.exit(1)
        # Without standalone mode click returns the code of a typer.Exit (our error codes) instead of exiting.
        sys.exit(rv if isinstance(rv, int) else 0)


app = typer.Typer(
    cls=_OneLineErrors,
    name="xmask",
    help=_MAIN_HELP,
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode="markdown",
)
presets_app = typer.Typer(
    help="List and show the YAML presets.\n\nExamples:\n\n    xmask presets ls\n\n    xmask presets show node-level --set structure.powers.k=3",
    no_args_is_help=True,
)
cache_app = typer.Typer(
    help="List, verify and clear the HDF5 structure cache.\n\nExamples:\n\n    xmask cache ls\n\n    xmask cache verify\n\n    xmask cache clear mutag",
    no_args_is_help=True,
)
app.add_typer(presets_app, name="presets")
app.add_typer(cache_app, name="cache")

FormatOpt = Annotated[
    Optional[str],
    typer.Option("--format", "-f", help="Result format on stdout: human or json (default: the global --format).",
                 show_default=False),
]
PresetOpt = Annotated[Optional[str], typer.Option("--preset", "-p", help="Preset name (see `xmask presets ls`) or YAML path.")]
DatasetOpt = Annotated[Optional[str], typer.Option("--dataset", "-d", help="Dataset name; overrides the preset's data.dataset.", show_default=False)]
SetOpt = Annotated[
    Optional[list[str]],
    typer.Option("--set", "-s", help="Dotted override KEY=VALUE, repeatable, e.g. `--set structure.powers.k=3`."),
]
CacheDirOpt = Annotated[
    Optional[Path], typer.Option("--cache-dir", help="Cache directory [env XMASK_CACHE; default ./cache].", show_default=False)
]


def _debug() -> bool:
    return os.environ.get("XMASK_DEBUG", "").strip() not in ("", "0", "false")


def _output(ctx: typer.Context, fmt: str | None) -> Output:
    obj = ctx.find_root().obj or {}
    chosen = (fmt or obj.get("format") or os.environ.get("XMASK_FORMAT") or "human").lower()
    if chosen not in ("human", "json"):
        raise UsageError(f"--format must be 'human' or 'json', got '{chosen}'")
    return Output(fmt=chosen, quiet=bool(obj.get("quiet")))


#: What an interrupted command leaves, and how to go on (appended to "error: interrupted").
_RESUME_HINTS = {
    "train": "; `xmask train` with the same options and --resume continues from the last finished epoch",
    "prepare": "; no partial cache file is kept: run `xmask prepare` again",
    "ablate": "; run the same `xmask ablate` again: finished runs are read back, killed ones resume",
    "tune": "; the same `xmask tune` with --resume continues the study (the trial that was running is recorded as failed)",
}


def handle_errors(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Turn xmask errors into one stderr line and an exit code (traceback with XMASK_DEBUG=1)."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except typer.Exit:
            raise
        except XmaskError as exc:
            if _debug():
                traceback.print_exc()
            typer.echo(f"error: {exc}", err=True)
            raise typer.Exit(exc.exit_code) from None
        except KeyboardInterrupt:
            typer.echo(f"error: interrupted{_RESUME_HINTS.get(fn.__name__, '')}", err=True)
            raise typer.Exit(130) from None
        except Exception as exc:  # a bug or an unexpected library failure
            if _debug():
                traceback.print_exc()
            first = str(exc).splitlines()[0] if str(exc) else ""
            typer.echo(f"error: {type(exc).__name__}: {first} (set XMASK_DEBUG=1 for the traceback)", err=True)
            raise typer.Exit(1) from None

    return wrapper


def _version(value: bool) -> None:
    if value:
        typer.echo(f"xmask {__version__}")
        raise typer.Exit()


@app.callback()
def main_callback(
    ctx: typer.Context,
    fmt: Annotated[Optional[str], typer.Option("--format", "-f", help="Result format: human or json [env XMASK_FORMAT; default human].", show_default=False)] = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No log lines on stderr.")] = False,
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit.")
    ] = False,
) -> None:
    """Global options; the help text is _MAIN_HELP."""
    # No default here: an unset --format must not shadow XMASK_FORMAT (see _output).
    ctx.obj = {"format": fmt.lower() if fmt else None, "quiet": quiet}


# -------------------------------------------------------------------- prepare
@app.command(epilog=_EXIT_HELP)
@handle_errors
def prepare(
    ctx: typer.Context,
    dataset: Annotated[Optional[str], typer.Argument(help="Dataset name (see README), e.g. cora, MUTAG, ogbg-molhiv.", show_default=False)] = None,
    preset: PresetOpt = None,
    set_: SetOpt = None,
    workers: Annotated[int, typer.Option("--workers", "-j", min=1, help="Processes: N > 1 computes spectra and partitions in N-1 workers alongside.")] = 1,
    force: Annotated[bool, typer.Option("--force", help="Recompute even if the cache has this key.")] = False,
    data_root: Annotated[
        Optional[Path], typer.Option("--data-root", help="Data root holding NAME/raw/... folders [env XMASK_DATA_ROOT].", show_default=False)
    ] = None,
    cache_dir: CacheDirOpt = None,
    offline: Annotated[bool, typer.Option("--offline", help="Never download [env XMASK_OFFLINE=1].")] = False,
    fmt: FormatOpt = None,
) -> None:
    """Compute normalized adjacency powers, SPD, spectra and partitions into the HDF5 cache.

    The same dataset, graphs and parameters map to the same file: a second run
    does no work and prints its path.

    Examples:

        xmask prepare cora

        xmask prepare PROTEINS --data-root ../shared/datasets --workers 2

        xmask prepare MUTAG --set structure.powers.k=6 --set structure.spd.max_distance=4

        xmask --format json prepare cora --preset node-level
    """
    from xmask_cli import config as C
    from xmask_cli.data.registry import get_dataset
    from xmask_cli.prepare import prepare_dataset, resolve_cache_dir

    out = _output(ctx, fmt)
    overrides = list(set_ or [])
    if dataset is not None:
        spec = get_dataset(dataset)
        overrides.insert(0, f"data.dataset={spec.name}")
        preset = preset or f"{spec.level}-level"
    cfg = C.resolve(preset or "node-level", overrides)
    spec = get_dataset(cfg.data.dataset)
    cdir = resolve_cache_dir(cache_dir)
    with out.progress(f"prepare {spec.name}", total=1) as bar:
        summary = prepare_dataset(cfg, data_root=data_root, cache_dir=cdir, workers=workers, force=force,
                                  offline=True if offline else None, log=out.log, progress=bar)

    def human(con: Any) -> None:
        state = "already cached" if summary.cached else f"prepared in {summary.seconds:.2f}s"
        con.print(kv_table(f"{spec.name}: {state}", [
            ("graphs", summary.graphs), ("nodes", summary.nodes), ("edges", summary.edges),
            ("features", f"{summary.features['detail']}, width {summary.features['dim']}" if summary.features else "-"),
            ("file", summary.path), ("size", human_bytes(summary.size_bytes)), ("seconds", summary.seconds),
            *_truncation_rows(summary.truncation),
        ]))

    out.result(summary.to_dict(), human)


def _truncation_rows(report: dict[str, Any]) -> list[tuple[str, str]]:
    """Human rows for prepare's truncation report: rule and dropped mass per power."""
    if not report.get("large_graphs"):
        return [("truncation", "none (no large graph: every power exact)")]
    rows = [("truncation", f"tau={report['tau']:g}, topk={report['topk']} on {report['large_graphs']} large graph(s); "
                           f"Â^1 and real edges kept whole")]
    for group, label, name in (("powers", "k", "dropped Â^k mass"), ("rrwp", "step", "dropped P^k mass")):
        if group in report:
            d = report[group]
            cells = [f"{label}={j}: mean {m:.2%} max {x:.2%}" for j, m, x in zip(d[label], d["mean"], d["max"])]
            rows.append((f"{name} (per row)", "; ".join(cells)))
    return rows


# ---------------------------------------------------------------------- train
DeviceOpt = Annotated[str, typer.Option("--device", help="auto (CUDA when present), cpu, cuda or cuda:N.")]
DataRootOpt = Annotated[
    Optional[Path], typer.Option("--data-root", help="Data root holding NAME/raw/... folders [env XMASK_DATA_ROOT].", show_default=False)
]
OfflineOpt = Annotated[bool, typer.Option("--offline", help="Never download [env XMASK_OFFLINE=1].")]


def _run_preset(preset: str | None, dataset: str | None, set_: list[str] | None) -> tuple[str, list[str]]:
    """Preset and overrides of `train` / `ablate`: `--dataset` overrides data.dataset and, without
    `--preset`, picks the dataset's own preset (else its level's); the default is graph-level."""
    from xmask_cli import config as C
    from xmask_cli.data.registry import get_dataset

    overrides = list(set_ or [])
    if dataset is not None:
        spec = get_dataset(dataset)
        overrides.insert(0, f"data.dataset={spec.name}")
        if preset is None:
            preset = spec.key if spec.key in C.list_presets() else f"{spec.level}-level"
    return preset or "graph-level", overrides


def _fmt_metric(v: Any) -> str:
    return "-" if v is None else f"{v:.4f}"


@app.command(epilog=_EXIT_HELP)
@handle_errors
def train(
    ctx: typer.Context,
    preset: PresetOpt = None,
    dataset: DatasetOpt = None,
    set_: SetOpt = None,
    seed: Annotated[Optional[int], typer.Option("--seed", min=0, help="One seed (default 0).", show_default=False)] = None,
    seeds: Annotated[Optional[str], typer.Option("--seeds", help="A sweep: 0-4, 0,2,7 or 0-2,9; writes aggregate.json (mean ± std).", show_default=False)] = None,
    device: DeviceOpt = "auto",
    resume: Annotated[bool, typer.Option("--resume", help="Continue killed runs from their last.pt (finished ones are only re-reported); refused when the config differs in more than train.epochs.")] = False,
    overwrite: Annotated[bool, typer.Option("--overwrite", help="Replace the run folders' previous runs (without it an existing run is refused).")] = False,
    runs_dir: Annotated[Optional[Path], typer.Option("--runs-dir", help="Root of run folders [default: the preset's run.root, ./runs].", show_default=False)] = None,
    name: Annotated[Optional[str], typer.Option("--name", help="Run name: `runs/<name>/<seed>/` [default `<dataset>-<level>`].", show_default=False)] = None,
    data_root: DataRootOpt = None,
    cache_dir: CacheDirOpt = None,
    offline: OfflineOpt = False,
    fmt: FormatOpt = None,
) -> None:
    """Train the X-LogSMask transformer; one run folder per seed.

    Node, link, edge-regression and graph tasks share one engine. The structure
    cache is read (and prepared first when missing). Early stopping and the
    restored checkpoint are chosen on validation only; test is reported.
    Each run writes `runs/<name>/<seed>/`: config.json (resolved), metrics.jsonl,
    best.pt, last.pt, summary.json. A folder holding a run is refused unless
    --resume or --overwrite is given; a folder is locked while a run writes it.

    Examples:

        xmask train --preset graph-level

        xmask train --preset graph-level --dataset PROTEINS --seeds 0-4 --data-root ../shared/datasets

        xmask train --preset node-level --dataset cora --set model.layers=1 --set train.epochs=200

        xmask train --preset link-level --dataset cora --format json > link.json

        xmask train --preset edge-regression --set edge.file=flights.csv

        xmask train --preset graph-level --seeds 0-4 --resume
    """
    from xmask_cli import config as C
    from xmask_cli.engine.experiment import parse_seeds, resolve_device, train_seeds
    from xmask_cli.prepare import resolve_cache_dir

    out = _output(ctx, fmt)
    if seed is not None and seeds is not None:
        raise UsageError("give --seed or --seeds, not both")
    seed_list = parse_seeds(seeds if seeds is not None else seed)
    preset, overrides = _run_preset(preset, dataset, set_)
    if name is not None:
        overrides.append(f"run.name={name}")
    cfg = C.resolve(preset, overrides)
    dev = resolve_device(device)
    tty_bar = not (out.json or out.quiet) and sys.stderr.isatty()
    every = max(1, cfg.train.epochs // 10)

    with out.progress("train", total=cfg.train.epochs) as bar:
        state = {"seed": seed_list[0]}

        def on_seed_start(s: int, epochs: int) -> None:
            state["seed"] = s
            bar(0, epochs)

        def on_epoch(s: int, row: dict[str, Any]) -> None:
            bar(row["epoch"] + 1, cfg.train.epochs)
            if not tty_bar and (row["epoch"] % every == 0):
                vals = " ".join(f"{k} {v:.4f}" for k, v in row.items() if k.startswith("val_"))
                out.log(f"seed {s} epoch {row['epoch']}: loss {row['loss']:.4f} {vals}")

        result = train_seeds(cfg, seed_list, device=dev, cache_dir=resolve_cache_dir(cache_dir),
                             data_root=data_root, offline=True if offline else None, run_root=runs_dir,
                             resume=resume, overwrite=overwrite, log=out.log, on_epoch=on_epoch,
                             on_seed_start=on_seed_start)

    def human(con: Any) -> None:
        from rich.table import Table

        t = Table(title=f"{result['dataset']} ({result['level']}, {result['metric']}) -> {result['run_root']}",
                  title_justify="left")
        for col in ("seed", "best epoch", "epochs", "train", "val", "test"):
            t.add_column(col, justify="right")
        for r in result["runs"]:
            m = r["metrics"]
            t.add_row(str(r["seed"]), str(r["best_epoch"]), str(r["epochs_run"]),
                      _fmt_metric(m["train"]), _fmt_metric(m["val"]), _fmt_metric(m["test"]))
        if len(result["runs"]) > 1:
            a = result["aggregate"]
            t.add_row("mean ± std", "", "", *(f"{a[p]['mean']:.4f} ± {a[p]['std']:.4f}" for p in ("train", "val", "test")))
        con.print(t)
        if result.get("features"):
            con.print(f"node features: {result['features']['detail']}, width {result['features']['dim']}")

    out.result(result, human)


@app.command("eval", epilog=_EXIT_HELP)
@handle_errors
def eval_(
    ctx: typer.Context,
    run_dir: Annotated[Path, typer.Argument(help="A run folder, `runs/<name>/<seed>/`.", show_default=False)],
    split: Annotated[str, typer.Option("--split", help="val, test or all.")] = "test",
    device: DeviceOpt = "auto",
    data_root: DataRootOpt = None,
    cache_dir: CacheDirOpt = None,
    offline: OfflineOpt = False,
    fmt: FormatOpt = None,
) -> None:
    """Reload a run's resolved config and best checkpoint and recompute its metric.

    Prints the recomputed value next to the one summary.json recorded; they
    agree (on the same device) because evaluation batches are fixed.

    Examples:

        xmask eval runs/mutag-graph/0

        xmask eval runs/cora-node/3 --split val --format json
    """
    from xmask_cli.engine.experiment import evaluate_run, resolve_device
    from xmask_cli.prepare import resolve_cache_dir

    out = _output(ctx, fmt)
    parts = {"val": ("val",), "test": ("test",), "all": ("train", "val", "test")}.get(split)
    if parts is None:
        raise UsageError(f"--split must be val, test or all, got '{split}'")
    result = evaluate_run(run_dir, parts=parts, device=resolve_device(device), cache_dir=resolve_cache_dir(cache_dir),
                          data_root=data_root, offline=True if offline else None, log=out.log)

    def human(con: Any) -> None:
        rows = []
        for p in parts:
            rows.append((f"{p} {result['metric']}", f"{result['metrics'][p]:.4f} (recorded {_fmt_metric(result['recorded'][p])})"))
        con.print(kv_table(f"{result['dataset']} {result['level']} seed {result['seed']}: {result['run_dir']}", rows))

    out.result(result, human)


# --------------------------------------------------------------------- ablate
@app.command(epilog=_EXIT_HELP)
@handle_errors
def ablate(
    ctx: typer.Context,
    preset: PresetOpt = None,
    dataset: DatasetOpt = None,
    set_: SetOpt = None,
    seeds: Annotated[str, typer.Option("--seeds", help="Seeds of every variant: 0-4, 0,2,7 ...")] = "0-4",
    variants: Annotated[Optional[str], typer.Option("--variants", help="Comma list of full, no-symnorm, no-logmask, no-multihead, one-layer, no-spd, no-rrwp, no-magnetic, no-eigen (the preset without that learned bias), for M3Dphormer presets no-local, no-cluster, no-global, flat-routing, no-routing, and for image presets positional (learned position embeddings, no mask) [default: the core five plus those that apply to the preset; images: full,no-logmask,positional].", show_default=False)] = None,
    out: Annotated[Optional[Path], typer.Option("--out", help="Ablation folder [default `./ablations/<dataset>-<level>`].", show_default=False)] = None,
    device: DeviceOpt = "auto",
    data_root: DataRootOpt = None,
    cache_dir: CacheDirOpt = None,
    offline: OfflineOpt = False,
    fmt: FormatOpt = None,
) -> None:
    """Component ablation (paper 000, Table 7): every variant over the seeds, one table.

    Variants: full; no-symnorm (N((A+I)^k) instead of Â^k); no-logmask (plain
    attention); no-multihead (every head reads Â^1); one-layer. Each runs as
    `xmask train` would, into `OUT/runs/<name>-<variant>/<seed>/`; finished runs
    are read back, not retrained. Writes OUT/ablation.csv and OUT/ablation.json;
    a failed variant is reported in its row.

    Examples:

        xmask ablate --preset node-level --dataset cora

        xmask ablate --dataset PROTEINS --seeds 0-2 --variants full,no-logmask --data-root ../shared/datasets

        xmask --format json ablate --preset graph-level --seeds 0-1 > ablation.json

        xmask ablate --preset vit-digits --variants full,no-logmask,positional
    """
    from xmask_cli import config as C
    from xmask_cli.ablate import parse_variants, run_ablation
    from xmask_cli.engine.experiment import parse_seeds, resolve_device, resolve_level
    from xmask_cli.prepare import resolve_cache_dir

    output = _output(ctx, fmt)
    preset, overrides = _run_preset(preset, dataset, set_)
    base = C.resolve(preset, overrides)
    level = resolve_level(base)
    names = parse_variants(variants, base)
    folder = out or Path("ablations") / (base.run.name or f"{base.data.dataset.lower()}-{level}")
    result = run_ablation(preset, overrides, seeds=parse_seeds(seeds), out_dir=folder,
                          cache_dir=resolve_cache_dir(cache_dir), variants=names, data_root=data_root,
                          offline=True if offline else None, device=resolve_device(device), log=output.log,
                          debug=_debug())

    def human(con: Any) -> None:
        from rich.table import Table

        t = Table(title=f"{result['dataset']} ({result['level']}, {result['metric']}, seeds {seeds}) -> {folder}",
                  title_justify="left")
        for col in ("variant", "val", "test", "Δ test vs full", "status"):
            t.add_column(col, justify="right" if col != "variant" else "left")
        for r in result["rows"]:
            val = "-" if r["val_mean"] is None else f"{r['val_mean']:.4f} ± {r['val_std']:.4f}"
            test = "-" if r["test_mean"] is None else f"{r['test_mean']:.4f} ± {r['test_std']:.4f}"
            delta = "-" if r["delta_test"] is None else f"{r['delta_test']:+.4f}"
            t.add_row(r["variant"], val, test, delta, r["status"] if r["status"] == "ok" else f"failed: {r['error']}")
        con.print(t)

    output.result(result, human)


# -------------------------------------------------------------------- explain
@app.command(epilog=_EXIT_HELP)
@handle_errors
def explain(
    ctx: typer.Context,
    run_dir: Annotated[Path, typer.Argument(help="A run folder, `runs/<name>/<seed>/`.", show_default=False)],
    graph: Annotated[Optional[list[int]], typer.Option("--graph", help="Graph id (graph-level runs); repeatable.", show_default=False)] = None,
    node: Annotated[Optional[list[int]], typer.Option("--node", help="Node id (node, link, edge runs): its neighbourhood; repeatable.", show_default=False)] = None,
    edge: Annotated[Optional[list[str]], typer.Option("--edge", help="U,V node pair (link, edge runs); repeatable.", show_default=False)] = None,
    image: Annotated[Optional[list[int]], typer.Option("--image", help="Test image index (image runs): the image beside each head's attention over the patch grid; repeatable.", show_default=False)] = None,
    query_patch: Annotated[Optional[int], typer.Option("--query-patch", min=0, help="Image runs: show this patch's attention row (row-major index) instead of the attention each patch receives, averaged over all queries.", show_default=False)] = None,
    out: Annotated[Optional[Path], typer.Option("--out", help="Output folder [default `maps/<name>-<seed>`].", show_default=False)] = None,
    max_nodes: Annotated[int, typer.Option("--max-nodes", min=2, help="Largest map kept; bigger targets are cropped to the closest nodes (and say so).")] = 64,
    device: DeviceOpt = "auto",
    data_root: DataRootOpt = None,
    cache_dir: CacheDirOpt = None,
    offline: OfflineOpt = False,
    fmt: FormatOpt = None,
) -> None:
    """Per-layer, per-head attention maps of a trained run (paper 000, Fig. 3).

    For every layer and head: the energy q·k/√d_h, the structural term as it
    enters the logits, their sum, and the attention after softmax, with the
    node ids they refer to. Writes OUT/maps.h5 (one dataset per target / layer /
    head / kind, attributes naming the head's power k and bias type) and one PNG
    grid per target (rows layers × kinds, columns heads). Prints each head's
    attention mass by shortest-path distance.

    Examples:

        xmask explain runs/proteins-graph/0 --graph 17 --out maps/

        xmask explain runs/cora-node/0 --node 5 --node 100 --max-nodes 48

        xmask --format json explain runs/cora-link/0 --edge 12,345

        xmask explain runs/digits-image/0 --image 3 --query-patch 5
    """
    from xmask_cli.engine.experiment import resolve_device
    from xmask_cli.explain import explain_run
    from xmask_cli.prepare import resolve_cache_dir

    output = _output(ctx, fmt)
    folder = out or Path("maps") / f"{run_dir.resolve().parent.name}-{run_dir.resolve().name}"
    result = explain_run(run_dir, graphs=graph or (), nodes=node or (), edges=edge or (), out_dir=folder,
                         cache_dir=resolve_cache_dir(cache_dir), data_root=data_root, device=resolve_device(device),
                         max_nodes=max_nodes, offline=True if offline else None, log=output.log,
                         images=image or (), query_patch=query_patch)

    def human(con: Any) -> None:
        from rich.table import Table

        for t in result["targets"]:
            con.print(f"{t['name']}: {t['target']}")
        buckets = result["hop_buckets"]
        table = Table(title=f"attention mass by hop distance, {len(result['targets'])} target(s) -> {folder}",
                      title_justify="left", padding=(0, 1), pad_edge=False, box=None)
        table.add_column("layer head", no_wrap=True)
        table.add_column("k", justify="right")
        for b in buckets:
            table.add_column("unr" if b == "unreachable" else b, justify="right", no_wrap=True)
        for layer, heads in result["hop_summary"].items():
            for head, info in heads.items():
                label = f"L{layer.split('_')[-1]} h{int(head.split('_')[-1]) + 1}"
                table.add_row(label, str(info["k"]), *(f"{info['mass'].get(b, 0.0):.2f}" for b in buckets))
        con.print(table)
        con.print(f"maps: {result['files']['maps']}")
        for path in result["files"]["figures"].values():
            con.print(f"figure: {path}")

    output.result(result, human)


# -------------------------------------------------------------------- presets
@presets_app.command("ls", epilog=_EXIT_HELP)
@handle_errors
def presets_ls(ctx: typer.Context, fmt: FormatOpt = None) -> None:
    """List the available presets.

    Examples:

        xmask presets ls

        xmask presets ls --format json
    """
    from xmask_cli import config as C

    out = _output(ctx, fmt)
    found = C.list_presets()
    rows = []
    for name, path in found.items():
        raw = C.read_yaml(path)
        parents = raw.get("extends") or []
        rows.append({"name": name, "path": str(path), "extends": [parents] if isinstance(parents, str) else parents,
                     "description": str(raw.get("description", "")) if "description" in raw else ""})

    def human(con: Any) -> None:
        from rich.table import Table

        t = Table("preset", "extends", "path")
        for r in rows:
            t.add_row(r["name"], ", ".join(r["extends"]), r["path"])
        con.print(t)

    out.result(rows, human)


@presets_app.command("show", epilog=_EXIT_HELP)
@handle_errors
def presets_show(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(help="Preset name or YAML path.")],
    set_: SetOpt = None,
    fmt: FormatOpt = None,
) -> None:
    """Print a preset fully resolved (inheritance and overrides applied, validated).

    Examples:

        xmask presets show graph-level

        xmask presets show cora --set structure.powers.k=2 --format json
    """
    import yaml

    from xmask_cli import config as C

    out = _output(ctx, fmt)
    cfg = C.resolve(name, list(set_ or []))
    out.result(cfg.to_dict(), lambda con: con.print(yaml.safe_dump(cfg.to_dict(), sort_keys=False).rstrip(), markup=False))


# ---------------------------------------------------------------------- cache
@cache_app.command("ls", epilog=_EXIT_HELP)
@handle_errors
def cache_ls(
    ctx: typer.Context,
    dataset: Annotated[Optional[str], typer.Argument(help="Only this dataset.", show_default=False)] = None,
    cache_dir: CacheDirOpt = None,
    fmt: FormatOpt = None,
) -> None:
    """List cache files with size, dataset, parameters, date and status.

    Status: ok; corrupt (unreadable: `xmask prepare` rebuilds it); writing
    (a temp file of a running prepare); stale (a temp file of a killed one,
    removed by the next prepare in that folder or by `cache clear`).

    Examples:

        xmask cache ls

        xmask cache ls cora --format json
    """
    from xmask_cli import cache as K
    from xmask_cli.prepare import resolve_cache_dir

    out = _output(ctx, fmt)
    rows = K.listing(resolve_cache_dir(cache_dir), dataset)

    def human(con: Any) -> None:
        from rich.table import Table

        if not rows:
            con.print(f"no cache files under {resolve_cache_dir(cache_dir)}", markup=False)
            return
        t = Table("dataset", "key", "graphs", "size", "created", "K", "norm", "parts", "status")
        for r in rows:
            pw = r["params"].get("powers", {})
            status = r["status"] if "writer_pid" not in r else f"{r['status']} temp (pid {r['writer_pid']})"
            t.add_row(r["dataset"], r["key"], str(r["num_graphs"]), human_bytes(r["size_bytes"]), r["created"],
                      str(pw.get("k", "?")), str(pw.get("normalization", "?")),
                      str(r["params"].get("partition", {}).get("parts", "?")), status)
        con.print(t)

    out.result(rows, human)


@cache_app.command("verify", epilog=_EXIT_HELP)
@handle_errors
def cache_verify(
    ctx: typer.Context,
    target: Annotated[Optional[str], typer.Argument(help="A cache file, or a dataset name (default: all).", show_default=False)] = None,
    cache_dir: CacheDirOpt = None,
    check_inputs: Annotated[
        bool, typer.Option("--check-inputs", help="Also reload each dataset (offline) and recompute its fingerprint.")
    ] = False,
    data_root: Annotated[
        Optional[Path], typer.Option("--data-root", help="Data root for --check-inputs [env XMASK_DATA_ROOT].", show_default=False)
    ] = None,
    fmt: FormatOpt = None,
) -> None:
    """Check every cache file: readable, checksums, key matches fingerprint, format current.

    Exits 4 if any file has a problem.

    Examples:

        xmask cache verify

        xmask cache verify cache/mutag/3f1c0e9a2b.h5 --format json

        xmask cache verify cora --check-inputs --data-root ../shared/datasets
    """
    from xmask_cli import cache as K
    from xmask_cli.errors import CacheError
    from xmask_cli.prepare import resolve_cache_dir

    out = _output(ctx, fmt)
    if target and Path(target).suffix == ".h5":
        if not Path(target).is_file():
            raise UsageError(f"no such cache file: {target}")
        files = [Path(target)]
    else:
        files = K.cache_files(resolve_cache_dir(cache_dir), target)
    fingerprints: dict[str, str | None] = {}

    def expected(p: Path) -> str | None:
        """Fingerprint of the dataset now on disk, for --check-inputs."""
        if not check_inputs:
            return None
        from xmask_cli.data.load import load_graphs, resolve_data_root
        from xmask_cli.data.registry import get_dataset

        name = p.parent.name
        if name not in fingerprints:
            spec = get_dataset(name)
            if spec.family == "images":  # the input of an image cache is the patch grid, which its key hashes
                return None
            graphs = load_graphs(spec, data_root=resolve_data_root(data_root), cache_dir=resolve_cache_dir(cache_dir), offline=True)
            fingerprints[name] = graphs.fingerprint()
        return fingerprints[name]

    report = [{"path": str(p), "ok": not probs, "problems": probs} for p in files for probs in [K.verify(p, expected(p))]]

    def human(con: Any) -> None:
        if not report:
            con.print("no cache files to verify")
        for r in report:
            con.print(f"{'ok ' if r['ok'] else 'BAD'} {r['path']}" + ("" if r["ok"] else ": " + "; ".join(r["problems"])), markup=False)

    out.result(report, human)
    bad = [r for r in report if not r["ok"]]
    if bad:
        typer.echo(f"error: {len(bad)} of {len(report)} cache file(s) failed verification; rebuild with `xmask prepare ... --force`", err=True)
        raise typer.Exit(CacheError.exit_code)


@cache_app.command("clear", epilog=_EXIT_HELP)
@handle_errors
def cache_clear(
    ctx: typer.Context,
    dataset: Annotated[Optional[str], typer.Argument(help="Only this dataset (default: everything).", show_default=False)] = None,
    cache_dir: CacheDirOpt = None,
    fmt: FormatOpt = None,
) -> None:
    """Remove cache files (and leftovers of interrupted writes).

    Deletes only files it can prove are its own: `<key>.h5` files in the cache
    dir's dataset folders that record that key and a format version, temp files
    of writers that are gone, and the `_pyg` staging folder it marked. Anything
    else is kept and listed. A path argument must be a dataset folder of the
    cache dir (exit 2 otherwise).

    Examples:

        xmask cache clear mutag

        xmask cache clear

        xmask cache clear --cache-dir /scratch/xmask-cache --format json
    """
    from xmask_cli import cache as K
    from xmask_cli.prepare import resolve_cache_dir

    out = _output(ctx, fmt)
    kept: list[Path] = []
    removed = [str(p) for p in K.clear(resolve_cache_dir(cache_dir), dataset, kept=kept)]

    def human(con: Any) -> None:
        con.print(f"removed {len(removed)} item(s)", markup=False)
        if kept:
            con.print(f"kept {len(kept)} item(s) that are not xmask cache files: "
                      + ", ".join(str(p) for p in kept[:5]) + (" ..." if len(kept) > 5 else ""), markup=False)

    out.result({"removed": removed, "kept": [str(p) for p in kept]}, human)


# ----------------------------------------------------------------------- tune
@app.command(epilog=_EXIT_HELP)
@handle_errors
def tune(
    ctx: typer.Context,
    preset: PresetOpt = None,
    dataset: DatasetOpt = None,
    set_: SetOpt = None,
    trials: Annotated[int, typer.Option("--trials", "-n", min=0, help="Trials this process runs (N processes on one study: the sum); with --resume: until the study holds N finished trials.")] = 20,
    seeds: Annotated[str, typer.Option("--seeds", help="Seeds each trial trains; its value is the mean validation metric over them.")] = "0-2",
    final_seeds: Annotated[str, typer.Option("--final-seeds", help="Seeds the best configuration is trained on after the search, test reported once; `none` skips.")] = "0-9",
    timeout: Annotated[Optional[str], typer.Option("--timeout", help="Start no trial after this long: 90s, 30m, 2h, 1h30m.", show_default=False)] = None,
    study: Annotated[Optional[str], typer.Option("--study", help="Study name and folder `runs/<study>/` [default `<dataset>-<level>-tune`].", show_default=False)] = None,
    storage: Annotated[Optional[str], typer.Option("--storage", help="Optuna storage URL shared by parallel processes [default sqlite:///runs/<study>/study.db].", show_default=False)] = None,
    resume: Annotated[bool, typer.Option("--resume", help="Continue a stopped study up to --trials finished trials; trials its killed process left running are recorded as failed.")] = False,
    sampler_seed: Annotated[int, typer.Option("--sampler-seed", min=0, help="Seed of the TPE sampler (a study is reproducible).")] = 0,
    pruner: Annotated[str, typer.Option("--pruner", help="median (stop trials below the median at the same seed and epoch) or none.")] = "median",
    plots: Annotated[bool, typer.Option("--plots/--no-plots", help="Draw the PNG plots (parallel workers can leave them to one process).")] = True,
    device: DeviceOpt = "auto",
    runs_dir: Annotated[Optional[Path], typer.Option("--runs-dir", help="Root of study folders [default: the preset's run.root, ./runs].", show_default=False)] = None,
    data_root: DataRootOpt = None,
    cache_dir: CacheDirOpt = None,
    offline: OfflineOpt = False,
    fmt: FormatOpt = None,
) -> None:
    """Search the preset's `tune:` space with Optuna (TPE, median pruner), scored on validation only.

    Each trial trains --seeds as `xmask train` does and scores the mean validation
    metric; test is never read during the search. Then the best configuration is
    trained on --final-seeds and test is reported once. The study folder holds
    study.db, best.yaml (`xmask train --preset best.yaml`), trials.csv,
    summary.json and PNG plots; watch it live with `optuna-dashboard sqlite:///runs/<study>/study.db`.

    Examples:

        xmask tune --preset mutag --trials 40 --seeds 0-2 --final-seeds 0-9

        xmask tune --preset cora --trials 60 --timeout 2h --study cora-t60

        xmask tune --preset cora --trials 60 --study cora-t60 --resume

        xmask tune --preset cora --study s --storage postgresql://host/db --trials 20 --final-seeds none
    """
    from xmask_cli import config as C
    from xmask_cli.engine.experiment import parse_seeds, resolve_device
    from xmask_cli.prepare import resolve_cache_dir
    from xmask_cli.tune.outputs import human_report
    from xmask_cli.tune.study import TuneOptions, parse_duration, run_study

    out = _output(ctx, fmt)
    preset, overrides = _run_preset(preset, dataset, set_)
    opts = TuneOptions(trials=trials, seeds=parse_seeds(seeds),
                       final_seeds=[] if final_seeds.strip().lower() == "none" else parse_seeds(final_seeds),
                       timeout_s=parse_duration(timeout), study=study, storage=storage, runs_dir=runs_dir,
                       resume=resume, sampler_seed=sampler_seed, pruner=pruner, plots=plots, device=resolve_device(device),
                       cache_dir=resolve_cache_dir(cache_dir), data_root=data_root, offline=True if offline else None)
    result = run_study(C.resolve(preset, overrides), opts, log=out.log)
    out.result(result, lambda con: human_report(con, result))


def main() -> None:
    """Console-script entry point."""
    try:
        app()
    except KeyboardInterrupt:
        sys.stderr.write("error: interrupted\n")
        sys.exit(130)


if __name__ == "__main__":
    main()
