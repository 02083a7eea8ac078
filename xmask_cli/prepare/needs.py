"""What a preset reads from the cache: the structure ``prepare`` computes for it (``prepare.compute: read``).

Every reader of the cache, and what it reads:

* heads: ``Â^{k_h}`` for ``k_h`` in ``model.head_powers`` (default ``1..heads``), so ``K = max k_h``.
  A plain head (``k_h = 0``, or ``model.use_bias: false``) attends over every stored pair, i.e. the union
  support of ``Â^1..Â^K``: a preset with one keeps ``K = structure.powers.k``;
* learned biases (``model.biases``): the section their registry entry names (``spd``, ``rrwp``,
  ``magnetic``, ``spectrum``, ``edge``: the loader's edge attributes); ``model.node_struct`` with ``rwse``: ``rrwp``;
* node level: METIS parts for ``node.mode: partition``, for the ``cluster`` expert, and for ``auto`` /
  ``subgraph`` when learned pair biases send large graphs to partition batches;
* ``xmask ablate`` and ``xmask tune`` build one config per variant or trial, each prepared for itself.

``xmask explain`` reads what its run read (hop summaries fall back to a breadth-first search without SPD).
"""
from __future__ import annotations

import dataclasses

from xmask_cli.config import Config, PartitionSection, StructureSection

__all__ = ["edge_readers", "model_needs", "read_powers", "read_sections", "structure_needed"]


def read_powers(cfg: Config) -> int:
    """``K``: the largest power a head reads, or ``structure.powers.k`` when a plain head spans the support."""
    from xmask_cli.model.model_config import head_powers, plain_heads  # the model's own rules

    if plain_heads(cfg.model):
        return int(cfg.structure.powers.k)
    return max(1, min(max(head_powers(cfg.model)), int(cfg.structure.powers.k)))


def model_needs(cfg: Config) -> frozenset[str]:
    """Structure sections the model's learned biases and its architecture (gps: the edges) read (batches carry
    them as extras)."""
    from xmask_cli.config_arch import arch_needs
    from xmask_cli.model.model_config import bias_needs  # the model's own rules

    return bias_needs(cfg.model) | arch_needs(cfg.model)


def edge_readers(cfg: Config) -> dict[str, bool]:
    """Who reads the edge section, as :func:`~xmask_cli.prepare.edge_section.edge_inputs` takes it:
    ``required`` (an ``edge`` bias reads the attributes themselves) and ``placeholder`` (the architecture
    reads the edges: a dataset without attributes stores a one-value placeholder)."""
    from xmask_cli.config_arch import arch_needs
    from xmask_cli.model.model_config import bias_needs

    return {"required": "edge" in bias_needs(cfg.model), "placeholder": "edge" in arch_needs(cfg.model)}


def read_sections(cfg: Config, level: str) -> frozenset[str]:
    """Structure sections beyond the powers that the preset reads (``spd``, ``spectrum``, ``magnetic``,
    ``rrwp``, ``edge``, ``partition``)."""
    m = cfg.model
    needs = set(model_needs(cfg))
    if "rwse" in m.node_struct.split("+"):
        needs.add("rrwp")
    if level == "node" and cfg.structure.partition.parts > 0:
        # With learned pair biases, auto and subgraph modes take partition batches on large graphs.
        if (cfg.node.mode == "partition" or "cluster" in m.experts
                or (m.biases and cfg.node.mode in ("auto", "subgraph"))):
            needs.add("partition")
    return frozenset(needs)


def structure_needed(cfg: Config, level: str) -> StructureSection:
    """The structure ``prepare`` computes for ``cfg`` at ``level``.

    ``prepare.compute: all`` returns ``cfg.structure`` as it is; ``read`` keeps ``K = read_powers(cfg)``
    and only the sections of :func:`read_sections` (the others disabled, so they leave the cache key).
    """
    s = cfg.structure
    if cfg.prepare.compute == "all":
        return s
    needs = read_sections(cfg, level)
    off = {name: dataclasses.replace(getattr(s, name), enabled=getattr(s, name).enabled and name in needs)
           for name in ("spd", "spectrum", "magnetic", "rrwp", "edge")}
    part = s.partition if "partition" in needs else PartitionSection(parts=0, seed=s.partition.seed)
    return dataclasses.replace(s, powers=dataclasses.replace(s.powers, k=read_powers(cfg)), partition=part, **off)
