"""The software a run or a cache file was made with: package versions, Python, device and thread counts.

Versions come from the installed distributions' metadata, so reading them imports none of the packages;
:func:`environment` imports torch and numba for the device and thread counts (a run has both loaded).
A leaf: it imports only the errors, so the package's ``__init__`` takes its version from here.
"""
from __future__ import annotations

import functools
import importlib
import importlib.metadata as md
import os
import platform
from collections.abc import Iterable
from typing import Any

from xmask_cli.errors import UsageError

__all__ = ["DISTRIBUTION", "OTHER_PACKAGES", "RUN_PACKAGES", "environment", "package_versions", "require_extra", "version_differences",
           "xmask_version"]

#: The distribution's name on the package index (the command is ``xmask``, the import package ``xmask_cli``;
#: the index's project ``xmask`` is another tool).
DISTRIBUTION = "xmask-cli"
#: The packages whose versions every run records (with xmask's and Python's).
RUN_PACKAGES = ("torch", "torch_geometric", "numba", "numpy", "scipy")
#: What ``xmask env`` adds for a bug report: the other dependencies and the optional extras.
OTHER_PACKAGES = ("h5py", "pymetis", "networkx", "scikit-learn", "matplotlib", "optuna", "typer", "rich",
                  "ogb", "tensorboard", "pyarrow")
NOT_INSTALLED = "not installed"


def xmask_version() -> str:
    """xmask's version from its installed metadata; ``0.1.0+src`` for a source tree that is not installed."""
    try:
        return md.version(DISTRIBUTION)
    except md.PackageNotFoundError:
        return "0.1.0+src"


@functools.lru_cache(maxsize=8)
def package_versions(packages: tuple[str, ...]) -> dict[str, str]:
    """``{"xmask": ..., package: version, ...}`` for ``packages`` (``not installed`` where one is missing)."""
    out = {"xmask": xmask_version()}
    for pkg in packages:
        try:
            out[pkg] = md.version(pkg)
        except md.PackageNotFoundError:
            out[pkg] = NOT_INSTALLED
    return out


def _device(device: str) -> dict[str, Any]:
    """The device a run trains on (``auto``: CUDA when there is one, as ``xmask train`` picks), with the
    accelerator's name where it is one (``cuda`` / ``cuda:1``)."""
    import torch

    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    out: dict[str, Any] = {"name": device}
    if device.startswith("cuda"):
        index = torch.device(device).index
        if torch.cuda.is_available() and (index or 0) < torch.cuda.device_count():
            out["model"] = torch.cuda.get_device_name(torch.cuda.current_device() if index is None else index)
            out["cuda"] = torch.version.cuda
        else:
            out["model"] = "not available"
    return out


def _threads() -> dict[str, int | None]:
    """The thread counts the run's numbers and speed depend on (torch, numba, CPUs this process may use)."""
    import numba
    import torch

    affinity = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return {"torch": torch.get_num_threads(), "torch_interop": torch.get_num_interop_threads(),
            "numba": int(numba.get_num_threads()), "cpus": os.cpu_count(), "cpus_usable": affinity}


def environment(device: str = "cpu") -> dict[str, Any]:
    """What a run's ``config.json`` records under ``environment`` and ``xmask env`` prints.

    ``versions``: xmask, Python and :data:`RUN_PACKAGES`; ``platform``: the OS as Python names it;
    ``device``: ``device`` (a torch device string) and, for CUDA, the card and the CUDA version;
    ``threads``: torch's intra- and inter-op threads, numba's, the machine's CPUs and those this process may use.
    """
    versions = {**package_versions(RUN_PACKAGES), "python": platform.python_version()}
    return {"versions": dict(sorted(versions.items())), "platform": platform.platform(),
            "device": _device(device), "threads": _threads()}


def version_differences(records: Iterable[tuple[str, object]]) -> dict[str, dict[str, list[str]]]:
    """Packages whose recorded versions differ between runs: ``{package: {version: [run, ...]}}``.

    ``records`` pairs each run with its ``environment`` record (anything else, e.g. a run saved without
    one, is skipped: it recorded nothing to compare).
    """
    seen: dict[str, dict[str, list[str]]] = {}
    for run, record in records:
        versions = record.get("versions") if isinstance(record, dict) else None
        if not isinstance(versions, dict):
            continue
        for pkg, ver in versions.items():
            seen.setdefault(str(pkg), {}).setdefault(str(ver), []).append(run)
    return {pkg: by_version for pkg, by_version in sorted(seen.items()) if len(by_version) > 1}


def require_extra(module: str, extra: str, what: str) -> None:
    """Import ``module`` (an optional dependency) or refuse what needs it with the command that installs it.

    Raises:
        UsageError: ``module`` is not installed (exit 2): ``what`` needs it, ``pip install "xmask-cli[extra]"``.
    """
    try:
        importlib.import_module(module)
    except ImportError:
        raise UsageError(f"{what} needs {module.split('.')[0]}, an optional dependency: "
                         f'pip install "{DISTRIBUTION}[{extra}]"') from None
