"""xmask: structure-aware graph transformers (X-LogSMask), from the command line and from Python.

The Python API (docs/python-api.md):

- :func:`train` -- train one run per seed, as ``xmask train`` (returns what it prints as json);
- :func:`dry_run` -- what :func:`train` would make, read and cost, as ``xmask train --dry-run``;
- :func:`load_run` -- a run folder read back: model, resolved config, predictions, ``xmask eval``'s metrics;
- :mod:`xmask_cli.transforms` -- :class:`~xmask_cli.transforms.AddLogSMask`, the structure on a PyG ``Data``;
- :mod:`xmask_cli.nn` -- :class:`~xmask_cli.nn.XLogSMaskAttention` and :class:`~xmask_cli.nn.XLogSMaskBlock`;
- :class:`XMaskError` and its subclasses (:mod:`xmask_cli.errors`): what every public function raises.

Names load on first use, so ``import xmask_cli`` (and the CLI's start-up) stays cheap.
"""
from __future__ import annotations

from importlib import import_module
from typing import Any

from xmask_cli.versions import xmask_version

# Read from the distribution's metadata (xmask-cli on the package index; 0.1.0+src when not installed).
__version__ = xmask_version()

#: Public name -> the module that defines it (read by ``__getattr__`` on first use).
_LAZY = {
    "train": "xmask_cli.api",
    "dry_run": "xmask_cli.api",
    "load_run": "xmask_cli.api",
    "LoadedRun": "xmask_cli.api",
    "AddLogSMask": "xmask_cli.transforms",
    "XLogSMaskAttention": "xmask_cli.nn",
    "XLogSMaskBlock": "xmask_cli.nn",
    # The error types, so a caller catches xmask's failures as one type (each carries its CLI exit code).
    **{name: "xmask_cli.errors" for name in ("XMaskError", "UsageError", "ConfigError", "DataNotFoundError",
                                             "CacheError", "NotWritableError", "RunNotFoundError",
                                             "DivergedError")},
}
_SUBMODULES = ("transforms", "nn")

__all__ = ["__version__", *_LAZY, *_SUBMODULES]


def __getattr__(name: str) -> Any:
    """The API's names and submodules, imported when first read (PEP 562)."""
    if name in _LAZY:
        return getattr(import_module(_LAZY[name]), name)
    if name in _SUBMODULES:
        return import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
