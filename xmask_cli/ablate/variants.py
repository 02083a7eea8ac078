"""The ablation's variants: what each changes (``--set`` overrides of the base config), which apply to a
config, and ``--variants`` parsed.

Example::

    base = resolve("graph-level", [])
    for variant in default_variants(base):
        print(variant, variant_overrides(variant, base))
"""
from __future__ import annotations

import dataclasses
import json

from xmask_cli.config import Config
from xmask_cli.engine.runs.plan import resolve_level
from xmask_cli.errors import UsageError
from xmask_cli.model.biases import BIASES

__all__ = ["VARIANTS", "CORE_VARIANTS", "BIAS_VARIANTS", "EXPERT_VARIANTS", "IMAGE_VARIANTS", "default_variants",
           "variant_overrides", "parse_variants", "parse_names"]

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
