"""The named architectures ``model.arch`` selects, and the model keys each one reads. A leaf.

Every architecture is built from the same parts (the X-LogSMask attention with its learned biases, the
same kernels, the same readouts); what differs is the layer and the head around them. Most model keys
are read by every architecture; :data:`READ_BY` lists the ones only some read. A key an architecture
does not read, set away from its default, is refused naming the architecture that reads it (exit 2):
a config never carries a switch its network ignores. A leaf: it reads the schema only.

``model.arch: auto`` (the default) picks the architecture from the config: ``experts`` when
``model.experts`` names experts, ``vit`` at the image level (or with ``model.encoder: patch``,
``model.positional`` or ``model.readout: cls``), ``gat`` for the old spelling of attention-only layers
(``model.ffn: false``, which maps with a one-line note on stderr, once per process), else
``transformer``. The model's own registry (``xmask_cli.model.archs.ARCHS``) holds the same names.
"""
from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

from xmask_cli.config import ModelSection

__all__ = ["ARCHS", "NEEDS", "READ_BY", "arch_needs", "MAPPED", "ArchRefusal", "resolve_arch", "keys_read",
           "arch_refusal", "has_ffn"]

#: The architectures, as ``model.arch`` names them (``auto``: picked from the config, see the module docstring).
ARCHS: tuple[str, ...] = ("transformer", "gat", "experts", "vit", "gps")
#: Cache sections an architecture's batches carry whatever its biases: gps's local message passing reads the
#: batch's edges (the ``edge`` section, with a one-value placeholder attribute on a dataset without any).
NEEDS: dict[str, frozenset[str]] = {"gps": frozenset({"edge"})}
#: Model keys that only some architectures read, and which ones; every other model key is read by all.
READ_BY: dict[str, tuple[str, ...]] = {
    "ffn_mult": ("transformer", "experts", "vit", "gps"),  # gat layers have no feed-forward sub-layer
    "activation": ("transformer", "gat", "gps"),
    "combine": ("gat",),
    # an attention output layer (its output_heads, output_powers with it): not over expert tokens, not on images
    "output": ("transformer", "gat"),
    "experts": ("experts",),
    "routing": ("experts",),
    "expert_attention": ("experts",),
    "positional": ("vit",),
}
#: Old keys whose non-default value names an architecture: ``model.ffn: false`` is ``model.arch: gat``.
#: Under ``model.arch: auto`` it maps with a note; under another named architecture it is refused.
MAPPED: dict[str, tuple[Any, str]] = {"ffn": (False, "gat")}
#: Whether a line for a key was written already (the note comes once per process).
_NOTED: set[str] = set()


class ArchRefusal(Exception):
    """What :func:`arch_refusal` found: the message and the keys it read (the config layer raises it as a
    :class:`~xmask_cli.errors.ConfigError`)."""

    def __init__(self, message: str, keys: tuple[str, ...]):
        super().__init__(message)
        self.keys = keys


def _get(model: Any, key: str) -> Any:
    """A field of a model section or view, or of its dict (a run's saved config: a key it predates is at its
    default)."""
    if isinstance(model, dict):
        return model[key] if key in model else getattr(ModelSection, key, None)
    return getattr(model, key)


def _same(a: Any, b: Any) -> bool:
    """Equal values, a list and a tuple of the same items included (a run view stores tuples)."""
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return list(a) == list(b)
    return bool(a == b)


def _picked(model: Any, level: str | None) -> tuple[str, str | None]:
    """``model.arch: auto`` resolved: the architecture and the old key that named it (None: no old key)."""
    if _get(model, "experts"):
        return "experts", None
    if level == "image" or _get(model, "encoder") == "patch" or _get(model, "positional") != "none" \
            or _get(model, "readout") == "cls":
        return "vit", None
    for key, (value, arch) in MAPPED.items():
        if _get(model, key) == value:
            return arch, key
    return "transformer", None


def resolve_arch(model: Any, level: str | None = None, note: Callable[[str], None] | None = None) -> str:
    """The architecture ``model`` (a model section, a ModelConfig or its dict) builds at ``level``.

    ``note``: where the one-line note of an old key goes (default: stderr, once per key and process).
    """
    arch = str(_get(model, "arch"))
    if arch != "auto":
        return arch
    arch, old = _picked(model, level)
    if old is not None and old not in _NOTED:
        _NOTED.add(old)
        text = (f"note: model.{old}={str(MAPPED[old][0]).lower()} is the old spelling of model.arch={arch}; "
                f"read as model.arch={arch}")
        (note or (lambda line: print(line, file=sys.stderr)))(text)
    return arch


def arch_needs(model: Any, level: str | None = None) -> frozenset[str]:
    """The cache sections the architecture of ``model`` reads beyond the powers (:data:`NEEDS`)."""
    return NEEDS.get(resolve_arch(model, level, note=lambda line: None), frozenset())


def keys_read(arch: str) -> frozenset[str]:
    """The keys of :data:`READ_BY` that ``arch`` reads."""
    return frozenset(key for key, archs in READ_BY.items() if arch in archs)


def arch_refusal(model: Any, defaults: Any, level: str | None = None) -> ArchRefusal | None:
    """Why ``model`` cannot be built as its architecture (a key it does not read set away from
    ``defaults``, an old key naming another architecture, experts named without their keys); None if it can."""
    arch = resolve_arch(model, level, note=lambda line: None)
    for key, (value, named) in MAPPED.items():
        if _same(_get(model, key), value) and arch != named:
            return ArchRefusal(f"model.{key}={str(value).lower()} is model.arch={named}, not {arch}: set "
                               f"model.arch={named} (and drop model.{key})", (f"model.{key}", "model.arch"))
    if arch == "experts" and not _get(model, "experts"):
        return ArchRefusal("model.arch=experts needs model.experts (a subset of local, cluster, global)",
                           ("model.arch", "model.experts"))
    for key, archs in READ_BY.items():
        if arch not in archs and not _same(_get(model, key), _get(defaults, key)):
            named = " or ".join(f"model.arch={a}" for a in archs)
            return ArchRefusal(f"model.{key} is read by {named}, not model.arch={arch}: set {named}, or drop "
                               f"model.{key}", (f"model.{key}", "model.arch"))
    return None


def has_ffn(model: Any, level: str | None = None) -> bool:
    """Whether the blocks of ``model`` have their feed-forward sub-layer (not a gat's attention-only layers)."""
    return resolve_arch(model, level, note=lambda line: None) != "gat"
