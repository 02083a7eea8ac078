"""The learned structural biases (GTLM, paper 002 §3.2 and Appendix A) and their registry.

:data:`BIASES` is the one place that knows a bias by name: ``model.biases[].type``
names an entry, and the model (which module to build), the engine (which cache
section batches carry), ``ablate`` (the ``no-<bias>`` variant) and figures (the
head labels) read it from there. Adding a bias is one file in this folder (a
:class:`~xmask_cli.model.biases.base.LearnedBias`) plus one line below; see
docs/extending.md.

Each module serves ``num_heads`` heads (a subset of the attention's heads;
:class:`~xmask_cli.model.biases.stack.BiasStack` places them) and reads one kind
of cached structure from the batch's ``extras``:

=============  ==========================================  =================================
bias           dense extras (``[B, ...]``)                   sparse extras (per pair / node)
=============  ==========================================  =================================
``spd``        ``spd [B, N, N]`` hop distance                ``spd [E]``
``rrwp``       ``rrwp [B, S, N, N]`` walk probabilities       ``rrwp [E, S]``
``magnetic``   ``mag_vals [B, m]``, ``mag_vecs [B, N, m]``    ``mag_vals [N, m]``, ``mag_vecs [N, m]``
               (complex), ``mag_mask [B, m]``                (each node carries its graph's values)
``eigen``      ``eig_vals [B, m]``, ``eig_vecs [B, N, m]``,   ``eig_vals [N, m]``, ``eig_vecs [N, m]``,
               ``eig_mask [B, m]``                           ``eig_mask [N, m]``
``edge``       ``edge_attr [B, N, N, C]`` the joining edge's   ``edge_attr [E, C]``,
               attributes, ``edge_mask [B, N, N]`` joined      ``edge_mask [E]``
=============  ==========================================  =================================

Every term is added to the logits after the ``1/sqrt(d_h)`` scaling, as GTLM
(paper 002, Eq. 1) adds it, whatever ``mask_scale`` says about the X-LogSMask
term (:mod:`~xmask_cli.model.attention.structural`).

Hop distances follow the cache: ``d >= 0`` a distance, ``-1`` reachable but
beyond the cached cut-off, ``-2`` unreachable. Every module's output layer
starts at zero, so at initialisation a layer equals plain attention (GTLM
Appendix B), and every module gives 0 on padded pairs. SPD, RRWP and the
magnetic bias are 0 on the diagonal (a node with itself), as GTLM sets them; the edge bias is 0 there and
on every pair no edge joins.
"""
from __future__ import annotations

from dataclasses import dataclass

from xmask_cli.model.biases.base import BiasInputs, LearnedBias
from xmask_cli.model.biases.edge import EdgeBias
from xmask_cli.model.biases.eigen import EigenBias
from xmask_cli.model.biases.magnetic import MagneticBias
from xmask_cli.model.biases.rrwp import RrwpBias
from xmask_cli.model.biases.spd import SpdBias

__all__ = ["BiasEntry", "BIASES", "BiasInputs", "LearnedBias", "SpdBias", "RrwpBias", "MagneticBias", "EigenBias",
           "EdgeBias", "bias_entry"]


@dataclass(frozen=True)
class BiasEntry:
    """What xmask knows about one learned bias type.

    Attributes:
        cls: the module (built per layer by :meth:`LearnedBias.from_spec`).
        needs: the cache section it reads; ``structure.<needs>.enabled`` must be
            true at prepare, and batches then carry that section's extras.
        label: its short name in head labels, figures and tables (``"Â^2 + SPD"``).
        title: its name in prose (``xmask ablate`` variant descriptions).
        ablation: the ``xmask ablate`` variant that removes it from ``model.biases``.
    """

    cls: type[LearnedBias]
    needs: str
    label: str
    title: str
    ablation: str


#: ``model.biases[].type`` -> its entry; order is the order of ``ablate``'s variants. The schema holds the names
#: with the cache section each reads (``config.BIAS_NEEDS``: a config is checked without this registry or
#: torch); each entry's ``needs`` is that section (tested).
BIASES: dict[str, BiasEntry] = {
    "spd": BiasEntry(SpdBias, needs="spd", label="SPD", title="SPD", ablation="no-spd"),
    "rrwp": BiasEntry(RrwpBias, needs="rrwp", label="RRWP", title="RRWP", ablation="no-rrwp"),
    "magnetic": BiasEntry(MagneticBias, needs="magnetic", label="MagLap", title="magnetic-Laplacian",
                          ablation="no-magnetic"),
    "eigen": BiasEntry(EigenBias, needs="spectrum", label="Eigen", title="eigen", ablation="no-eigen"),
    "edge": BiasEntry(EdgeBias, needs="edge", label="Edge", title="edge-attribute", ablation="no-edge"),
}


def bias_entry(name: str) -> BiasEntry:
    """The entry of bias type ``name``.

    Raises:
        ValueError: no such bias type (the message lists the registered ones).
    """
    if name not in BIASES:
        raise ValueError(f"bias type must be one of {tuple(BIASES)}, got {name!r}")
    return BIASES[name]
