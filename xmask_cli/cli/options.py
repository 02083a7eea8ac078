"""The options commands share: one ``Annotated`` type per option, and the groups several commands take whole.

A command declares a shared option with its type (``fmt: FormatOpt = None``)
and a group with its class (``data: DataOptions``, ``run: RunOptions``): the
:func:`options` decorator spreads a group's fields into the command's
signature, where typer reads them as ordinary options (same names, help and
order), and hands the command one object built from them. So ``--device``,
``--data-root``, ``--cache-dir``, ``--offline``, ``--preset``, ``--dataset``
and ``--set`` read the same in every command, and the value handling that
goes with them (cache folder, offline flag, preset choice) is written once.
"""
from __future__ import annotations

import dataclasses
import functools
import inspect
import typing
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from xmask_cli.cli.completion import complete_preset, complete_run_dir

if TYPE_CHECKING:
    from xmask_cli.config import Config

__all__ = ["CacheDirOpt", "DataOptions", "DataRootOpt", "DatasetOpt", "DeviceOpt", "FlagsGroup", "FoldsOpt", "FormatOpt",
           "OfflineOpt", "PresetOpt", "RunDirArg", "RunOptions", "SetOpt", "options"]

FormatOpt = Annotated[
    str | None,
    typer.Option("--format", "-f", help="Result format on stdout: human or json (default: the global --format).",
                 show_default=False),
]
PresetOpt = Annotated[str | None, typer.Option("--preset", "-p", autocompletion=complete_preset, help="Preset name (see `xmask presets ls`) or YAML path [env XMASK_PRESETS: extra preset folders; with a dataset and no --preset: the dataset's own preset, else its level's].")]
DatasetOpt = Annotated[str | None, typer.Option("--dataset", "-d", help="Dataset name, or a folder of files (./mygraph: docs/datasets-from-files.md); overrides the preset's data.dataset.", show_default=False)]
SetOpt = Annotated[
    list[str] | None,
    typer.Option("--set", "-s", help="Dotted override KEY=VALUE, repeatable, typed: ints, floats (1e-30), bools, lists ([1,2]), null; e.g. `--set structure.powers.k=3`."),
]
CacheDirOpt = Annotated[
    Path | None, typer.Option("--cache-dir", help="Cache directory [env XMASK_CACHE; default ./cache].", show_default=False)
]
DeviceOpt = Annotated[str, typer.Option("--device", help="auto (CUDA when present), cpu, cuda or cuda:N.")]
DataRootOpt = Annotated[
    Path | None, typer.Option("--data-root", help="Data root holding NAME/raw/... folders [env XMASK_DATA_ROOT].", show_default=False)
]
OfflineOpt = Annotated[bool, typer.Option("--offline", help="Never download: a missing dataset fails at once, naming where it looked [env XMASK_OFFLINE=1].")]
#: ``--folds K`` of ``train`` and ``ablate``: one declaration, so both refuse the same values in the same words.
FoldsOpt = Annotated[int | None, typer.Option("--folds", min=2, help="Graph level: Errica et al.'s protocol, K stratified outer folds fixed by the seed, a stratified 10 % holdout of each training part for selection, test once per fold; each seed's runs in `<seed>/fold-<i>/` of its run name's folder, fold files in `<seed>/folds/`. Same as --set data.folds=K.", show_default=False)]
RunDirArg = Annotated[Path, typer.Argument(help="A run folder, `runs/<name>/<seed>/`.", show_default=False,
                                           autocompletion=complete_run_dir)]


def _no_flag_metavar(params: list[Any]) -> list[Any]:
    """``params`` with every flag's metavar emptied: a flag takes no value, but typer's rich help shows a
    ``<bool>`` type for it unless its metavar is set (an empty one shows nothing)."""
    for param in params:
        if getattr(param, "is_flag", False) and param.metavar is None:
            param.metavar = ""
    return params


class FlagsGroup(typer.core.TyperGroup):
    """A command group whose ``--help`` (and each of its commands' ``--help``, ``--help`` itself included)
    shows no value type on flags."""

    def get_params(self, ctx: Any) -> list[Any]:
        return _no_flag_metavar(super().get_params(ctx))

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        command = super().get_command(ctx, cmd_name)
        if command is not None:
            _no_flag_metavar(command.get_params(ctx))  # the help option too, made and cached by get_params
        return command


@dataclass(frozen=True)
class DataOptions:
    """``--data-root``, ``--cache-dir``, ``--offline``: where a command finds its data and structure cache."""

    data_root: DataRootOpt = None
    cache_dir: CacheDirOpt = None
    offline: OfflineOpt = False

    def cache(self) -> Path:
        """The cache folder: ``--cache-dir``, else ``XMASK_CACHE``, else ``./cache``."""
        from xmask_cli.prepare import resolve_cache_dir

        return resolve_cache_dir(self.cache_dir)

    @property
    def no_download(self) -> bool | None:
        """True with ``--offline``; None leaves the choice to ``XMASK_OFFLINE``."""
        return True if self.offline else None


@dataclass(frozen=True)
class RunOptions:
    """``--preset``, ``--dataset``, ``--set``: the config of a run (train, tune, ablate)."""

    preset: PresetOpt = None
    dataset: DatasetOpt = None
    set_: SetOpt = None

    def choose(self, *extra: str) -> tuple[str, list[str]]:
        """Preset name and overrides (``extra`` after ``--set``'s); see :func:`xmask_cli.api.choose_preset`."""
        from xmask_cli.api import choose_preset

        return choose_preset(self.preset, self.dataset, [*(self.set_ or []), *extra])

    def config(self) -> Config:
        """The resolved config."""
        from xmask_cli.config_resolve import resolve

        return resolve(*self.choose())


#: The option groups :func:`options` spreads.
_GROUPS = (DataOptions, RunOptions)


def options(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Spread each parameter of ``fn`` typed with a group (:class:`DataOptions`, :class:`RunOptions`) into that
    group's options, in place; ``fn`` is called with the group built from them."""
    sig = inspect.signature(fn, eval_str=True)
    params: list[inspect.Parameter] = []
    groups: dict[str, tuple[type, list[str]]] = {}
    for p in sig.parameters.values():
        if p.annotation not in _GROUPS:
            params.append(p)
            continue
        hints = typing.get_type_hints(p.annotation, include_extras=True)
        fields = dataclasses.fields(p.annotation)
        groups[p.name] = (p.annotation, [f.name for f in fields])
        params += [inspect.Parameter(f.name, p.kind, default=f.default, annotation=hints[f.name]) for f in fields]

    @functools.wraps(fn)
    def command(*args: Any, **kwargs: Any) -> Any:
        for name, (cls, names) in groups.items():
            kwargs[name] = cls(**{n: kwargs.pop(n) for n in names})
        return fn(*args, **kwargs)

    command.__signature__ = sig.replace(parameters=params)  # type: ignore[attr-defined]
    return command
