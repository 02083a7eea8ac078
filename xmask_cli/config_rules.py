"""The rules between config sections: each a small named function, all listed once in :data:`RULES`.

A section's own fields are checked by the section itself (:mod:`xmask_cli.config_section`); what
lives here are settings each valid on their own that cannot run together (a model switch that needs a
task level, experts that need the node level and the whole graph, ``model.encoder: none`` against a
residual). Every rule raises :class:`~xmask_cli.errors.ConfigError` (exit 2) naming the keys, and
declares the keys it reads (:attr:`Rule.keys`, carried by its refusal as :attr:`ConfigError.keys`).

Two stages: ``config`` rules hold for any use of a config, so building one (``resolve``) runs them;
``run`` rules say what a training run of it needs (its task level, the structure it reads, the
dataset's split), so the engine runs them once the level is known (``engine.runs.experiment.check_config``,
with :class:`RunFacts`). Rules marked
``model`` hold for the model alone: :class:`~xmask_cli.model.model_config.ModelConfig` runs the same
functions, so a model built in Python is refused with the same error and message. Checks that need the
loaded dataset stay in the engine. A leaf: it reads the schema and the errors only.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

from xmask_cli.config import BIAS_NEEDS, Config, ModelSection
from xmask_cli.config_arch import MAPPED, NEEDS, READ_BY, arch_refusal, resolve_arch
from xmask_cli.errors import ConfigError

__all__ = ["Rule", "RULES", "RunFacts", "EXPERT_NODE_MODES", "NODE_STRUCT_LEVELS", "check_rules", "check_model_rules",
           "check_expert_node_mode", "check_query_mode_biases", "resolve_encoder"]

#: Node batching modes that attention experts can run: they attend over the whole graph's tokens at once.
EXPERT_NODE_MODES = ("auto", "full")
#: Levels whose node features may carry ``model.node_struct`` channels: pair tasks would read the degree of
#: held-out edges (their structure is the training edges'), image patches have no node features of their own.
NODE_STRUCT_LEVELS = ("graph", "node")


@dataclass(frozen=True)
class RunFacts:
    """What a rule knows beside the config: nothing at the config stage; at the run stage the task level
    and the dataset's split kind, both resolved from the dataset registry by the engine.

    Attributes:
        level: the task level (``graph``, ``node``, ...); None at the config stage.
        split: the dataset's split (``scaffold``: OGB's official split, which results are reported on);
            None where unknown (a model built in Python).
    """

    level: str | None = None
    split: str | None = None


def resolve_encoder(encoder: str, level: str | None, dataset: str | None = None) -> str:
    """``model.encoder`` as the model builds it: ``auto`` is ``patch`` at the image level, ``atom`` for an
    OGB molecule set (``ogbg-mol*``: atom and bond ids), else ``linear``; any other value as it is. The
    one place ``auto`` is resolved (the engine passes the dataset; a model built in Python has none)."""
    if encoder != "auto":
        return encoder
    if level == "image":
        return "patch"
    return "atom" if dataset is not None and dataset.lower().startswith("ogbg-mol") else "linear"


# ------------------------------------------------------------ config stage
def arch_reads_its_keys(cfg: Config, run: RunFacts) -> None:
    """Each architecture (``model.arch``) reads its own keys (:data:`~xmask_cli.config_arch.READ_BY`): a key
    its network would ignore, set away from its default, is refused naming the architecture that reads it."""
    resolve_arch(cfg.model, run.level)  # the one-line note of an old key, where one maps
    refusal = arch_refusal(cfg.model, ModelSection(), run.level)
    if refusal is not None:
        raise ConfigError(str(refusal), keys=list(refusal.keys))


def encoder_none_takes_no_residual(cfg: Config, run: RunFacts) -> None:
    """Without an encoder the first block's input is the raw features, wider than ``model.hidden``: no
    residual, pre-norm or experts can take it."""
    m = cfg.model
    if m.encoder != "none":
        return
    clash = [text for text, bad in (("model.residual=true", m.residual), ("model.norm=pre", m.norm == "pre"),
                                    ("model.experts", bool(m.experts))) if bad]
    if clash:
        raise ConfigError(f"with encoder 'none' (model.encoder=none) the first block reads the raw features, "
                          f"wider than model.hidden: it does not combine with {', '.join(clash)}; drop them "
                          f"(or use model.encoder=linear)")


def output_powers_within_head_powers(cfg: Config, run: RunFacts) -> None:
    """Prepare caches the powers the blocks' heads read (``prepare.needs.read_powers``): an output head
    reading a larger one would find none in the cache (the model alone takes it)."""
    m = cfg.model
    top = max(m.head_powers) if m.head_powers is not None else m.heads
    if m.output_powers is not None and max(m.output_powers) > top:
        raise ConfigError(f"model.output_powers: powers must lie in 1..{top} (the largest power the blocks read, "
                          f"model.head_powers)")


def check_expert_node_mode(mode: str) -> None:
    """Raise unless attention experts can run on node batching mode ``mode`` (the expert node task's guard
    for direct use calls it too)."""
    if mode not in EXPERT_NODE_MODES:
        raise ConfigError(f"model.experts (M3Dphormer attention experts) run on the whole graph's tokens, which "
                          f"node.mode={mode} does not give: set node.mode=full (or drop model.experts)")


def experts_need_full_node_mode(cfg: Config, run: RunFacts) -> None:
    """Experts attend over the whole graph's tokens: only full-graph node batching gives them."""
    if cfg.model.experts:
        check_expert_node_mode(cfg.node.mode)


# ------------------------------------------------------------ run stage
def head_powers_within_structure_k(cfg: Config, run: RunFacts) -> None:
    """A head reads ``Â^k_h``: the cache must hold powers up to the largest ``k_h``."""
    m = cfg.model
    top = max(m.head_powers) if m.head_powers is not None else m.heads
    if m.use_bias and top > cfg.structure.powers.k:
        raise ConfigError(f"model.head_powers reads Â^{top} but structure.powers.k is "
                          f"{cfg.structure.powers.k}: raise structure.powers.k or lower the powers")


def experts_take_hard_support(cfg: Config, run: RunFacts) -> None:
    """``outside_support: eps`` needs a dense path over the whole domain, which token masks are not."""
    m = cfg.model
    if m.experts and m.use_bias and m.outside_support == "eps":
        raise ConfigError("model.outside_support=eps (log(eps) outside the support) needs a dense path over the "
                          "whole domain; attention experts (model.experts) attend over sparse token masks: use "
                          "model.outside_support=hard")


def cluster_expert_needs_partition(cfg: Config, run: RunFacts) -> None:
    """The cluster expert's tokens are METIS parts, which prepare computes only when asked for."""
    if "cluster" in cfg.model.experts and cfg.structure.partition.parts < 1:
        raise ConfigError("model.experts has 'cluster', which reads METIS parts: set structure.partition.parts >= 1")


def check_query_mode_biases(mode: str, biases: Sequence[str]) -> None:
    """Raise if query batches (``mode``) would have to carry learned biases (``biases``, named); the node
    task's guard for direct use calls it too."""
    if mode == "query" and biases:
        raise ConfigError(f"node.mode=query does not carry learned pair biases (model.biases: "
                          f"{', '.join(biases)}): use node.mode=partition or full")


def query_mode_takes_no_learned_biases(cfg: Config, run: RunFacts) -> None:
    """Query batches carry ``Â^k`` at each query's pairs only, not what a learned bias reads (SPD, walks, ...)."""
    if run.level == "node":
        check_query_mode_biases(cfg.node.mode, [b.type for b in cfg.model.biases])


def image_switches_need_image_level(cfg: Config, run: RunFacts) -> None:
    """The patch encoder, the class-token readout and position embeddings exist only on patch grids."""
    m = cfg.model
    if run.level != "image" and (m.encoder == "patch" or m.readout == "cls" or m.positional != "none"
                                 or m.arch == "vit"):
        raise ConfigError(f"model.arch=vit, model.encoder=patch, model.readout=cls and model.positional are for "
                          f"image datasets (digits, cifar10), not a {run.level}-level task")


def image_level_takes_patches_only(cfg: Config, run: RunFacts) -> None:
    """Images are read by the patch encoder, under the X-LogSMask term of the patch grid alone."""
    m = cfg.model
    if run.level != "image":
        return
    if m.arch not in ("auto", "vit"):
        raise ConfigError(f"model.arch={m.arch}: image datasets take model.arch=vit (or auto)")
    if m.encoder not in ("auto", "patch"):
        raise ConfigError(f"model.encoder={m.encoder}: image datasets take the patch encoder (auto or patch)")
    if m.biases or m.experts:
        raise ConfigError("the image level takes the X-LogSMask term of the patch grid only: drop model.biases "
                          "and model.experts")


def experts_need_node_level(cfg: Config, run: RunFacts) -> None:
    """Experts route per node over a graph's tokens (M3Dphormer): a node-level model only."""
    if cfg.model.experts and run.level != "node":
        raise ConfigError(f"model.experts (M3Dphormer attention experts) are for node tasks, not a {run.level}-level "
                          f"one: drop model.experts")


def encoder_none_needs_node_level(cfg: Config, run: RunFacts) -> None:
    """Without an encoder the first block reads raw node features: only node-level inputs are those."""
    if cfg.model.encoder == "none" and run.level != "node":
        raise ConfigError(f"encoder 'none' (model.encoder=none: the first block reads the raw node features) is "
                          f"for the node level, not {run.level}: set model.encoder=auto")


def output_attention_needs_node_level(cfg: Config, run: RunFacts) -> None:
    """The attention output layer emits one output per node: a node-level head only."""
    if cfg.model.output == "attention" and run.level != "node":
        raise ConfigError(f"model.output=attention (a last attention layer whose heads emit each node's outputs) "
                          f"is for the node task, not {run.level}: set model.output=mlp")


def node_struct_needs_node_features(cfg: Config, run: RunFacts) -> None:
    """Structural channels join the node features of graph- and node-level tasks only."""
    ns = cfg.model.node_struct
    if ns != "none" and run.level not in NODE_STRUCT_LEVELS:
        raise ConfigError(f"model.node_struct={ns} is supported at the {' and '.join(NODE_STRUCT_LEVELS)} levels, "
                          f"not {run.level}: set model.node_struct=none")


def rwse_needs_rrwp(cfg: Config, run: RunFacts) -> None:
    """The RWSE channels are read from the cached random walks."""
    ns = cfg.model.node_struct
    if "rwse" in ns.split("+") and not cfg.structure.rrwp.enabled:
        raise ConfigError(f"model.node_struct={ns} reads the RWSE from the cached random walks: "
                          f"set structure.rrwp.enabled=true (structure.rrwp.steps sets the walk lengths)")


def folds_need_graph_level(cfg: Config, run: RunFacts) -> None:
    """Outer folds stratify graphs by class: other levels keep their split."""
    if cfg.data.folds and run.level != "graph":
        raise ConfigError(f"--folds (data.folds={cfg.data.folds}) is the graph-level protocol (stratified folds of "
                          f"graphs); a {run.level}-level task keeps its split: drop --folds")


def biases_need_their_structure(cfg: Config, run: RunFacts) -> None:
    """A learned bias reads one cache section (``config.BIAS_NEEDS``): prepare computes it only when enabled."""
    for b in cfg.model.biases:
        section = BIAS_NEEDS[b.type]
        if not getattr(cfg.structure, section).enabled:
            raise ConfigError(f"model.biases uses {b.type}, which reads structure.{section}: "
                              f"set structure.{section}.enabled=true")


def gps_needs_graph_batches(cfg: Config, run: RunFacts) -> None:
    """GraphGPS's local message passing runs on a graph batch's edges (padded or packed graph batches only)."""
    if cfg.model.arch == "gps" and run.level != "graph":
        raise ConfigError(f"model.arch=gps (GraphGPS layers: message passing on each graph's edges beside the "
                          f"attention) runs at the graph level, not {run.level}: set model.arch=transformer")


def arch_needs_its_structure(cfg: Config, run: RunFacts) -> None:
    """An architecture that reads a cache section (``config_arch.NEEDS``: gps, the edges) needs it enabled."""
    for section in sorted(NEEDS.get(cfg.model.arch, ())):
        if not getattr(cfg.structure, section).enabled:
            raise ConfigError(f"model.arch={cfg.model.arch} reads structure.{section} (the graphs' edges): "
                              f"set structure.{section}.enabled=true")


def folds_keep_the_official_split(cfg: Config, run: RunFacts) -> None:
    """Results on a set with an official split (OGB's scaffold split) are reported on that split."""
    if cfg.data.folds and run.split == "scaffold":
        raise ConfigError(f"{cfg.data.dataset} has an official split (OGB scaffold) that results are reported on: "
                          f"drop --folds (data.folds={cfg.data.folds})")


# ------------------------------------------------------------ the table
@dataclass(frozen=True)
class Rule:
    """One rule: its function (``check(cfg, run)``), the keys it reads, its stage, and whether the model
    alone needs it.

    Attributes:
        check: raises :class:`ConfigError` when ``cfg`` breaks the rule (``run``: :class:`RunFacts`, empty
            at the config stage).
        keys: the dotted config keys the rule reads (a key names its whole subtree: ``model.biases``); a
            refusal carries them (:attr:`ConfigError.keys`), which is how ``xmask tune`` knows whether a
            refused value depends on another searched key. ``tests/test_config_rules.py`` checks them
            against what the function reads.
        stage: ``config`` (any use of a config: run when one is built) or ``run`` (what a training run
            needs: run with the level, before any file is touched).
        model: the rule holds for the model alone; :class:`~xmask_cli.model.model_config.ModelConfig`
            runs it too (with the other sections at their defaults and its task as the level).
    """

    check: Callable[[Config, RunFacts], None]
    keys: tuple[str, ...]
    stage: Literal["config", "run"]
    model: bool = False

    @property
    def name(self) -> str:
        """The rule's function name, e.g. ``experts_need_node_level``."""
        return self.check.__name__


_M = "model."
_ENCODER_KEYS = (_M + "arch", _M + "encoder", _M + "readout", _M + "positional")
#: Every rule between sections, in the order they run.
RULES: tuple[Rule, ...] = (
    Rule(arch_reads_its_keys, (_M + "arch", _M + "encoder", _M + "positional", _M + "readout",
                               *(_M + k for k in READ_BY), *(_M + k for k in MAPPED)), "config", model=True),
    Rule(encoder_none_takes_no_residual, (_M + "encoder", _M + "residual", _M + "norm", _M + "experts"), "config",
         model=True),
    Rule(experts_need_full_node_mode, (_M + "experts", "node.mode"), "config"),
    Rule(output_powers_within_head_powers, (_M + "output_powers", _M + "head_powers", _M + "heads"), "config"),
    Rule(head_powers_within_structure_k, (_M + "head_powers", _M + "heads", _M + "use_bias", "structure.powers.k"),
         "run"),
    Rule(experts_take_hard_support, (_M + "experts", _M + "use_bias", _M + "outside_support"), "run", model=True),
    Rule(cluster_expert_needs_partition, (_M + "experts", "structure.partition.parts"), "run"),
    Rule(query_mode_takes_no_learned_biases, ("node.mode", _M + "biases"), "run"),
    Rule(image_switches_need_image_level, _ENCODER_KEYS, "run", model=True),
    Rule(image_level_takes_patches_only, (_M + "arch", _M + "encoder", _M + "biases", _M + "experts"), "run",
         model=True),
    Rule(experts_need_node_level, (_M + "experts",), "run", model=True),
    Rule(encoder_none_needs_node_level, (_M + "encoder",), "run", model=True),
    Rule(output_attention_needs_node_level, (_M + "output",), "run", model=True),
    Rule(node_struct_needs_node_features, (_M + "node_struct",), "run"),
    Rule(rwse_needs_rrwp, (_M + "node_struct", "structure.rrwp.enabled"), "run"),
    Rule(biases_need_their_structure, (_M + "biases", "structure"), "run"),
    Rule(gps_needs_graph_batches, (_M + "arch",), "run", model=True),
    Rule(arch_needs_its_structure, (_M + "arch", "structure"), "run"),
    Rule(folds_need_graph_level, ("data.folds",), "run"),
    Rule(folds_keep_the_official_split, ("data.folds", "data.dataset"), "run"),
)


def _run(rule: Rule, cfg: Config, run: RunFacts) -> None:
    try:
        rule.check(cfg, run)
    except ConfigError as exc:
        exc.keys = exc.keys | frozenset(rule.keys)
        raise


def check_rules(cfg: Config, level: str | None = None, *, split: str | None = None) -> None:
    """Run the ``config`` rules (``level`` None: what building a config runs) or the ``run`` rules for ``level``
    (``split``: the dataset's split kind, :class:`RunFacts`)."""
    stage = "config" if level is None else "run"
    for rule in RULES:
        if rule.stage == stage:
            _run(rule, cfg, RunFacts(level, split))


def check_model_rules(cfg: Config, level: str) -> None:
    """Run every rule the model alone needs (both stages), as a model built in Python meets them."""
    for rule in RULES:
        if rule.model:
            _run(rule, cfg, RunFacts(level))
