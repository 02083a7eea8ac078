"""The component ablation (paper 000, Table 7) as one call: variants x seeds -> a table.

Each variant is the base config plus a few overrides; every (variant, seed)
runs under the same protocol as ``xmask train`` (same splits, validation-only
selection) into ``<out>/runs/<name>-<variant>/<seed>/``. A run that already
has its ``summary.json`` is read back, not retrained; a killed one resumes.
A variant that fails is reported in its own row, and the others still run.

Example::

    result = run_ablation("node-level", ["data.dataset=cora"], seeds=[0, 1, 2],
                          out_dir=Path("ablations/cora"), cache_dir=Path("cache"))
    for row in result.rows:
        print(row.variant, row.test_mean, row.delta_test)
"""
from __future__ import annotations

import csv
import dataclasses
import io
import json
import os
import traceback
from collections.abc import Callable
from pathlib import Path

from xmask_cli.config import Config
from xmask_cli.config_resolve import resolve
from xmask_cli.engine import sweep
from xmask_cli.engine.data import DatasetMemo
from xmask_cli.engine.plan import resolve_level, resolve_metric, run_name
from xmask_cli.engine.runs import RunDir, write_json, write_text
from xmask_cli.engine.selection import RULE
from xmask_cli.errors import UsageError
from xmask_cli.fs import check_writable, refuse_links
from xmask_cli.model.biases import BIASES
from xmask_cli.results import AblationResult, AblationRow

__all__ = ["VARIANTS", "CORE_VARIANTS", "BIAS_VARIANTS", "EXPERT_VARIANTS", "IMAGE_VARIANTS", "default_variants",
           "variant_overrides", "parse_variants", "parse_names", "run_ablation"]

#: Variant -> what it changes (Table 7's columns, plus a depth ablation).
CORE_VARIANTS: dict[str, str] = {
    "full": "the preset as is",
    "no-symnorm": "powers of A+I normalised afterwards, N((A+I)^k), instead of Â^k",
    "no-logmask": "no X-LogSMask term (learned biases, if any, stay): plain attention otherwise",
    "no-multihead": "every head reads Â^1 (no per-head hop count)",
    "one-layer": "a single transformer block",
}
#: One variant per learned bias type (its registry entry's ``ablation``): the preset without that bias
#: (GTLM Table 5's rows).
BIAS_VARIANTS: dict[str, str] = {e.ablation: f"without the learned {e.title} bias" for e in BIASES.values()}
#: Bias variant -> the bias type it removes.
_BIAS_OF_VARIANT: dict[str, str] = {e.ablation: kind for kind, e in BIASES.items()}
#: M3Dphormer (model.experts): one expert removed, or the router replaced (paper 003's ablation).
EXPERT_VARIANTS: dict[str, str] = {
    "no-local": "without the local expert",
    "no-cluster": "without the cluster expert",
    "no-global": "without the global (class-token) expert",
    "flat-routing": "one softmax gate over the experts instead of the bi-level sigmoid router",
    "no-routing": "experts averaged with equal fixed weights",
}
#: Image level (paper 000, Table 12): the ViT arm, against which ``full`` (mask, no positions) is compared.
IMAGE_VARIANTS: dict[str, str] = {
    "positional": "ViT with learned position embeddings and no mask (the paper's baseline arm)",
}
VARIANTS: dict[str, str] = {**CORE_VARIANTS, **BIAS_VARIANTS, **EXPERT_VARIANTS, **IMAGE_VARIANTS}


def default_variants(cfg: Config) -> list[str]:
    """The variants that apply to ``cfg``: the core ones, ``no-<bias>`` for each bias it has, and with
    attention experts the expert and routing ablations (``no-multihead`` and ``one-layer`` stay).
    Image datasets: ``full``, ``no-logmask`` and ``positional`` (paper 000, Table 12, plus neither)."""
    kinds = {b.type for b in cfg.model.biases}
    if _is_image(cfg):  # Table 12: mask vs positions, plus neither
        return ["full", "no-logmask", "positional"]
    out = [*CORE_VARIANTS, *[v for v in BIAS_VARIANTS if _BIAS_OF_VARIANT[v] in kinds]]
    if cfg.model.experts:
        out += [v for v in EXPERT_VARIANTS if not v.startswith("no-") or v == "no-routing" or v[3:] in cfg.model.experts]
    return out


def _is_image(cfg: Config) -> bool:
    return resolve_level(cfg) == "image"


def variant_overrides(variant: str, cfg: Config) -> list[str]:
    """``--set`` overrides turning the base ``cfg`` into ``variant``."""
    if variant == "full":
        return []
    if variant == "positional":
        if not _is_image(cfg):
            raise UsageError("variant 'positional' (position embeddings instead of the mask) is for image "
                             "datasets such as digits or cifar10")
        return ["model.positional=learned", "model.use_bias=false"]
    if variant == "no-symnorm":
        return ["structure.powers.normalization=no-symnorm"]
    if variant == "no-logmask":
        return ["model.use_bias=false"]
    if variant == "no-multihead":
        return [f"model.head_powers=[{','.join(['1'] * cfg.model.heads)}]"]
    if variant == "one-layer":
        return ["model.layers=1"]
    if variant in BIAS_VARIANTS:
        kind = _BIAS_OF_VARIANT[variant]
        kept = [dataclasses.asdict(b) for b in cfg.model.biases if b.type != kind]
        if len(kept) == len(cfg.model.biases):
            raise UsageError(f"variant '{variant}': the preset has no {kind} bias in model.biases")
        over = [f"model.biases={json.dumps(kept)}"]  # JSON is YAML: --set parses it as a list of mappings
        if not kept and not cfg.model.use_bias:
            raise UsageError(f"variant '{variant}': removing the only bias leaves plain attention; "
                             f"compare with no-logmask instead")
        return over
    if variant in EXPERT_VARIANTS:
        if not cfg.model.experts:
            raise UsageError(f"variant '{variant}': the preset has no attention experts (model.experts)")
        if variant == "flat-routing":
            return ["model.routing=flat"]
        if variant == "no-routing":
            return ["model.routing=none"]
        name = variant[3:]
        experts = [e for e in cfg.model.experts if e != name]
        if len(experts) == len(cfg.model.experts):
            raise UsageError(f"variant '{variant}': the preset has no {name} expert")
        if not experts:
            raise UsageError(f"variant '{variant}': removing the only expert leaves no attention")
        return [f"model.experts=[{','.join(experts)}]"]
    raise UsageError(f"unknown ablation variant '{variant}': choose from {', '.join(VARIANTS)}")


def parse_variants(text: str | None, cfg: Config | None = None) -> list[str]:
    """``"full,no-logmask"`` -> the list (``full`` first, always included: deltas need it).

    Without ``text``: :func:`default_variants` of ``cfg`` (the core variants without a config).
    """
    if not text:
        return default_variants(cfg) if cfg is not None else list(CORE_VARIANTS)
    names = parse_names(text, list(VARIANTS), "ablation variant", "--variants", "variant")
    return ["full", *[v for v in names if v != "full"]]


def parse_names(text: str, known: list[str] | tuple[str, ...], what: str, option: str, item: str = "name") -> list[str]:
    """``"a, b"`` -> ``["a", "b"]``, each checked against ``known`` and none twice.

    Raises:
        UsageError: ``unknown <what>(s) ...: choose from ...`` or ``<option> '<text>': a <item> appears twice``.
    """
    names = [v.strip() for v in text.split(",") if v.strip()]
    unknown = [v for v in names if v not in known]
    if unknown:
        raise UsageError(f"unknown {what}(s) {', '.join(unknown)}: choose from {', '.join(known)}")
    if len(set(names)) != len(names):
        raise UsageError(f"{option} '{text}': a {item} appears twice")
    return names


def _stats(values: list[float]) -> tuple[float | None, float | None]:
    if not values:
        return None, None
    mean = sum(values) / len(values)
    return mean, (sum((v - mean) ** 2 for v in values) / len(values)) ** 0.5


def run_ablation(
    preset: str | None,
    overrides: list[str],
    *,
    seeds: list[int],
    out_dir: Path,
    cache_dir: Path,
    variants: list[str] | None = None,
    data_root: str | os.PathLike | None = None,
    offline: bool | None = None,
    device: str = "cpu",
    log: Callable[[str], None] = lambda m: None,
    debug: bool = False,
) -> AblationResult:
    """Train every variant over ``seeds``; write ``ablation.csv`` / ``ablation.json`` in ``out_dir``.

    Returns:
        an :class:`~xmask_cli.results.AblationResult` (its ``to_json()`` is ``ablation.json``): one
        :class:`~xmask_cli.results.AblationRow` per variant with ``status`` (``ok`` or ``failed``),
        ``error``, ``val_mean/std``, ``test_mean/std``, ``delta_test`` (test mean minus that of
        ``full``), ``runs`` (per-seed metrics) and ``reused`` (seeds read back instead of trained).
    """
    base = resolve(preset, overrides)
    if base.data.folds:  # a variant's row is one figure per seed: K fold runs would need their own table
        raise UsageError(f"xmask ablate trains each variant on the dataset's split; data.folds={base.data.folds} "
                         f"is for train and tune: drop --set data.folds (or set it to 0)")
    variants = parse_variants(",".join(variants) if variants else None, base)
    level = resolve_level(base)
    metric = resolve_metric(base, level)
    dataset = base.data.dataset if level != "edge" else "edges"
    name = run_name(base, level)  # <dataset>-<level>: a folder dataset's name, never its path
    # Before the first variant trains: the folder and the two tables it ends with (each variant's sweep checks
    # its own run folders).
    check_writable(out_dir, "output folder", "pass another --out")
    if out_dir.is_dir():
        refuse_links(out_dir, ("ablation.json", "ablation.csv"), "output folder")
    out_dir.mkdir(parents=True, exist_ok=True)
    datasets = DatasetMemo()  # the dataset read once, by the first run that trains; every later one reuses it
    rows = [_variant_row(variant, preset, overrides, base, name, seeds, out_dir=out_dir, cache_dir=cache_dir,
                         data_root=data_root, offline=offline, device=device, log=log, debug=debug,
                         datasets=datasets)
            for variant in variants]
    full = next((r for r in rows if r.variant == "full"), None)
    rows = [dataclasses.replace(row, delta_test=_delta(row, full)) for row in rows]
    result = AblationResult(dataset=dataset, level=level, metric=metric, seeds=tuple(seeds), name=name, selection=RULE,
                            preset=preset, overrides=tuple(overrides), out_dir=str(out_dir), rows=tuple(rows))
    write_json(out_dir / "ablation.json", result.to_json())
    buf = io.StringIO()
    writer = csv.writer(buf)
    writer.writerow(["variant", "status", "metric", "seeds", "val_mean", "val_std", "test_mean", "test_std",
                     "delta_test", "error"])
    for r in rows:
        writer.writerow([r.variant, r.status, metric, len(r.runs), r.val_mean, r.val_std,
                         r.test_mean, r.test_std, r.delta_test, r.error or ""])
    write_text(out_dir / "ablation.csv", buf.getvalue())
    return result


def _delta(row: AblationRow, full: AblationRow | None) -> float | None:
    """``row``'s test mean minus that of ``full`` (None where either has none)."""
    if full is None or full.test_mean is None or row.test_mean is None:
        return None
    return row.test_mean - full.test_mean


def _variant_row(variant: str, preset: str | None, overrides: list[str], base: Config, name: str, seeds: list[int],
                 *, out_dir: Path, cache_dir: Path, data_root: str | os.PathLike | None, offline: bool | None,
                 device: str, log: Callable[[str], None], debug: bool, datasets: DatasetMemo) -> AblationRow:
    """One variant over ``seeds`` (finished runs read back); a failure is kept in the row, not raised."""
    runs: dict[str, dict[str, float]] = {}
    reused: list[int] = []
    error = None
    try:
        cfg = resolve(preset, [*overrides, *variant_overrides(variant, base), f"run.name={name}-{variant}"])
        for seed in seeds:
            run = RunDir(out_dir / "runs" / f"{name}-{variant}" / str(seed))
            if (run.path / RunDir.SUMMARY).is_file():
                summary = run.read_summary()
                reused.append(seed)
            else:
                log(f"ablation {variant}: seed {seed}")
                # Through the module, read per call: a substitute for train_seeds (tests) is seen.
                summary = sweep.train_seeds(cfg, [seed], device=device, cache_dir=cache_dir, data_root=data_root,
                                            offline=offline, run_root=out_dir / "runs", resume=True,
                                            log=log, datasets=datasets).runs[0]
            runs[str(seed)] = dict(summary.metrics)
    except Exception as exc:  # one variant's failure must not hide the others' results
        if debug:
            traceback.print_exc()
        error = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
        log(f"ablation {variant} failed: {error}")
    (val_mean, val_std), (test_mean, test_std) = (_stats([m[part] for m in runs.values()]) for part in ("val", "test"))
    return AblationRow(variant=variant, description=VARIANTS[variant], status="ok" if error is None else "failed",
                       error=error, runs=runs, reused=tuple(reused), val_mean=val_mean, val_std=val_std,
                       test_mean=test_mean, test_std=test_std)
