"""The ``structure`` section of the config schema: what ``xmask prepare`` stores per graph (adjacency
powers, SPD, spectra, RRWP, edge attributes, partitions) and how large graphs are prepared.

Part of :mod:`xmask_cli.config` (which re-exports every class here); split out to keep each module small.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

from xmask_cli.config_section import FLOAT32_TINY, Need, Section


@dataclass(frozen=True)
class PowersSection(Section):
    """Normalized adjacency powers ``Â^1..Â^K`` (X-LogSMask)."""

    WITHIN = {"k": (1, 16)}

    k: int = 4
    normalization: Literal["sym", "no-symnorm"] = "sym"
    eps: float = 1e-30  # used where the log mask is formed, not by prepare

    def _check_own(self, need: Need, at: Callable[[str], str]) -> None:
        # float32 forms the log mask: a smaller eps would be 0 there, and log(0) turns "eps" into "hard"
        need(FLOAT32_TINY <= self.eps < 1, "eps", f"must lie in [{FLOAT32_TINY:.4g}, 1) (float32's smallest normal "
             f"number: a smaller eps is 0 where the log mask is formed)")


@dataclass(frozen=True)
class SpdSection(Section):
    """Shortest-path distances up to ``max_distance`` hops."""

    WITHIN = {"max_distance": (1, 254)}

    enabled: bool = True
    max_distance: int = 8


@dataclass(frozen=True)
class SpectrumSection(Section):
    """Eigenpairs of the symmetric normalized Laplacian."""

    AT_LEAST = {"num_eigs": 1}

    enabled: bool = True
    num_eigs: int = 16  # m: lowest non-zero eigenpairs kept (plus every zero pair) for graphs above full_max_nodes
    full_max_nodes: int = 64  # graphs this small keep every eigenpair


@dataclass(frozen=True)
class MagneticSection(Section):
    """Eigenpairs of the magnetic Laplacian (directed structure)."""

    AT_LEAST = {"num_eigs": 1}

    enabled: bool = False
    q: float = 0.25
    num_eigs: int = 16


@dataclass(frozen=True)
class RrwpSection(Section):
    """Random-walk probabilities ``I, P, ..., P^steps`` with ``P = D^-1 A``."""

    WITHIN = {"steps": (1, 64)}

    enabled: bool = False
    steps: int = 16


@dataclass(frozen=True)
class EdgeAttrSection(Section):
    """The dataset's edge attributes (its loader's ``edge_attr``) per pair of joined nodes, for the ``edge`` bias.

    On by default as ``spd`` is: under ``prepare.compute: read`` the cache holds it only when an ``edge`` bias
    reads it, and a dataset without edge attributes simply has none to store unless a bias asks for them."""

    enabled: bool = True


@dataclass(frozen=True)
class PartitionSection(Section):
    """METIS partitions for node-level graphs (0: none)."""

    AT_LEAST = {"parts": 0}

    parts: int = 0
    seed: int = 0


@dataclass(frozen=True)
class LargeGraphSection(Section):
    """Rules for graphs with more than ``min_nodes`` nodes: nothing n x n dense."""

    AT_LEAST = {"tau": 0, "topk": 0, "fanout": (0, "0: no cap"), "spd_radius": 1}

    min_nodes: int = 5000
    tau: float = 1e-6  # drop power entries below tau after every product
    topk: int = 128  # keep at most topk entries per row of every power (0: all)
    # Right-hand factor of every product: a row of more than fanout entries (a hub) keeps its diagonal and its
    # fanout - 1 lowest-degree neighbours, so prepare's cost is bounded whatever the degrees (0: no cap).
    fanout: int = 128
    spd_radius: int = 2  # SPD only up to this many hops


@dataclass(frozen=True)
class StructureSection(Section):
    """What ``xmask prepare`` computes into the cache."""

    powers: PowersSection = field(default_factory=PowersSection)
    spd: SpdSection = field(default_factory=SpdSection)
    spectrum: SpectrumSection = field(default_factory=SpectrumSection)
    magnetic: MagneticSection = field(default_factory=MagneticSection)
    rrwp: RrwpSection = field(default_factory=RrwpSection)
    edge: EdgeAttrSection = field(default_factory=EdgeAttrSection)
    partition: PartitionSection = field(default_factory=PartitionSection)
    large: LargeGraphSection = field(default_factory=LargeGraphSection)
