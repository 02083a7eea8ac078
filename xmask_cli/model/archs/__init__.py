"""The named architectures ``model.arch`` selects: one small builder each, all over the same attention.

``ARCHS`` maps each name of :data:`xmask_cli.config_arch.ARCHS` to its builder (tested to agree, with the
keys each reads). A new architecture is a module here with an :class:`Architecture` subclass, one entry
below, its name in ``config_arch.ARCHS`` and ``config.ModelSection.arch``, and its keys in
``config_arch.READ_BY`` (see docs/extending.md).
"""
from __future__ import annotations

from xmask_cli.model.archs.base import Architecture, Output
from xmask_cli.model.archs.experts import Experts
from xmask_cli.model.archs.gat import Gat
from xmask_cli.model.archs.gps import Gps
from xmask_cli.model.archs.transformer import Transformer
from xmask_cli.model.archs.vit import Vit

__all__ = ["ARCHS", "Architecture", "Output", "get_arch"]

#: Every architecture, by the name ``model.arch`` gives it.
ARCHS: dict[str, Architecture] = {a.name: a for a in (Transformer(), Gat(), Experts(), Vit(), Gps())}


def get_arch(name: str) -> Architecture:
    """The builder of architecture ``name`` (a resolved ``model.arch``, never ``auto``)."""
    try:
        return ARCHS[name]
    except KeyError:
        raise ValueError(f"no architecture {name!r}; expected one of {', '.join(ARCHS)}") from None
