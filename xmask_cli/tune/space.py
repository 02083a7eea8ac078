"""``xmask tune``'s side of the ``tune:`` space: its full check against the config, and sampling.

The space is parsed and checked alone by :mod:`xmask_cli.config_space` on every config build (its names are
re-exported here). :func:`check_space` with ``full=True`` (``xmask tune``, before any trial) also sets every
value on top of the whole config and puts it through training's checks; a value that fails only together
with another searched key (``model.hidden`` not a multiple of a tuned ``model.heads``) is left to the trial,
which then fails with its reason and the study goes on. Which keys a failure involves is what the failing
check declares (:attr:`~xmask_cli.errors.ConfigError.keys`), never read from the message. :func:`suggest`
draws a trial's values, :func:`decode` reads stored ones back.

No optuna import here: trials are duck-typed.
"""
from __future__ import annotations

from typing import Any

from xmask_cli.config import Config, ModelSection
from xmask_cli.config_arch import ARCHS, READ_BY
from xmask_cli.config_resolve import build, shorten
from xmask_cli.config_space import FORBIDDEN, Param, check_section, label, parse_space, values_to_probe
from xmask_cli.errors import ConfigError

__all__ = ["Param", "parse_space", "check_space", "check_section", "suggest", "decode", "with_values", "start_point",
           "unread_keys", "unread_defaults", "FORBIDDEN", "ARCH_KEY"]

#: Drawn first: which keys the rest of a trial reads depends on it.
ARCH_KEY = "model.arch"


def check_space(cfg: Any, *, full: bool = False) -> list[Param]:
    """Parse ``cfg.tune`` and check every value a trial can draw against its key.

    Every config build checks the space alone (``full=False``: :func:`check_section`: keys, entries,
    ranges, each value of the key's type). Domain checks that read other settings (``model.head_powers``
    needs one power per head, ``model.hidden`` a multiple of ``model.heads``) wait for ``full=True``
    (``xmask tune``, before any trial), since a ``--set`` for training (``model.heads=1``) must not trip
    over the search space: then every value is set on top of the whole config, rebuilt by the schema and
    put through training's checks (``check_config``). A value refused by a check that reads another
    searched key (:attr:`~xmask_cli.errors.ConfigError.keys`) is left to the trial (only some
    combinations fail: the trial fails with its reason and the study goes on).

    Raises:
        ConfigError: as :func:`parse_space`, or a value the key does not accept
            (``tune.<key>: value ... is not valid: ...``).
    """
    params = check_section(cfg)
    if not full:
        return params
    # Lazy: the engine loads torch; the space's own check above runs without it.
    from xmask_cli.engine.runs.experiment import check_config

    keys = {p.key for p in params}
    for p in params:
        for value in values_to_probe(p):
            try:
                check_config(with_values(cfg, {p.key: value}))
            except ConfigError as exc:
                if _involves(exc.keys, keys - {p.key}):
                    continue  # the refusing check reads another searched key: only some combinations fail
                raise ConfigError(f"tune.{p.key}: value {shorten(value)} is not valid: {exc}") from None
    return params


def _involves(read: frozenset[str], searched: set[str]) -> bool:
    """Whether a check that read ``read`` (dotted keys, a key standing for its subtree: ``structure``,
    ``model.biases[0].type``) read one of the ``searched`` keys."""
    return any(r == s or r.startswith((s + ".", s + "[")) or s.startswith(r + ".") for r in read for s in searched)


def _set(node: dict[str, Any], parts: list[str], value: Any) -> None:
    for part in parts[:-1]:
        node = node[part]
    node[parts[-1]] = value


def suggest(trial: Any, params: list[Param]) -> dict[str, Any]:
    """Draw one value per :class:`Param` from an Optuna ``trial``; returns ``{key: value}``.

    ``model.arch`` is drawn first when searched; a key its drawn architecture does not read
    (:data:`~xmask_cli.config_arch.READ_BY`: ``model.ffn_mult`` under ``gat``) is not drawn (a conditional
    space, so TPE learns nothing from a value that changed nothing) and is set to its default, which every
    architecture accepts."""
    values: dict[str, Any] = {}
    skip: set[str] = set()
    for p in sorted(params, key=lambda q: q.key != ARCH_KEY):  # model.arch first: it decides ``skip``
        if p.key in skip:
            continue
        if p.kind == "int":
            low, high = p.bounds()
            values[p.key] = trial.suggest_int(p.key, int(low), int(high), step=int(p.step or 1), log=p.log)
        elif p.kind == "float":
            low, high = p.bounds()
            values[p.key] = _tidy(p, trial.suggest_float(p.key, float(low), float(high), step=p.step, log=p.log))
        else:
            drawn = trial.suggest_categorical(p.key, p.labels())
            values[p.key] = p.choices[p.labels().index(drawn)]
            if p.key == ARCH_KEY:
                skip = unread_keys(params, values)
    return {**values, **unread_defaults(params, values)}


def unread_keys(params: list[Param], values: dict[str, Any]) -> set[str]:
    """The searched keys that the architecture in ``values`` (a drawn ``model.arch``) does not read."""
    arch = values.get(ARCH_KEY)
    if not isinstance(arch, str) or arch not in ARCHS:
        return set()  # not searched, or ``auto``: the full check already accepted every value
    return {p.key for p in params
            if p.key.startswith("model.") and p.key[6:] in READ_BY and arch not in READ_BY[p.key[6:]]}


def unread_defaults(params: list[Param], values: dict[str, Any]) -> dict[str, Any]:
    """The searched keys the drawn architecture does not read, at their defaults (what a preset set for the
    other architecture would otherwise be refused for)."""
    return {key: getattr(ModelSection(), key[6:]) for key in sorted(unread_keys(params, values))}


def decode(params: list[Param], raw: dict[str, Any], *, unread: bool = True) -> dict[str, Any]:
    """A trial's stored params (choice labels) back to config values; with ``unread``, the searched keys
    its architecture did not read as well, at their defaults (as :func:`suggest` set them)."""
    out = {}
    for p in params:
        if p.key in raw:
            out[p.key] = p.choices[p.labels().index(raw[p.key])] if p.kind == "choice" else _tidy(p, raw[p.key])
    return {**out, **unread_defaults(params, out)} if unread else out


def _tidy(p: Param, value: Any) -> Any:
    # A float grid point is low + k * step in binary floating point (0.30000000000000004): keep 0.3.
    return float(f"{value:.12g}") if p.kind == "float" and p.step is not None else value


def _inside(p: Param, value: Any) -> bool:
    """Whether ``value`` is a point of ``p``'s space (on its grid when it has a step)."""
    if p.kind == "choice":
        return label(value) in p.labels()
    low, high = p.bounds()
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not low <= value <= high:
        return False
    if p.step is None:
        return p.kind == "float" or float(value).is_integer()
    steps = (value - low) / p.step
    return abs(steps - round(steps)) < 1e-9


def start_point(cfg: Any, params: list[Param]) -> dict[str, Any]:
    """The preset's own values of the searched keys, as Optuna's raw parameters (choices as their labels),
    for the keys whose value lies in the space: ``xmask tune`` runs this point first, so a study never ends
    below its preset on validation."""
    data = cfg.to_dict()
    out: dict[str, Any] = {}
    for p in params:
        node: Any = data
        for part in p.key.split("."):
            node = node.get(part) if isinstance(node, dict) else None
        if _inside(p, node):
            out[p.key] = label(node) if p.kind == "choice" else node
    return out


def with_values(cfg: Any, values: dict[str, Any], **fixed: Any) -> Any:
    """``cfg`` with dotted ``values`` set and no ``tune`` section, rebuilt (hence checked) by the schema.

    ``fixed``: whole sections to replace as well (e.g. ``run={"name": "x", "root": "runs"}``).

    Raises:
        ConfigError: the result does not fit the schema.
    """
    data = cfg.to_dict()
    data["tune"] = {}
    data.update(fixed)
    for key, value in values.items():
        _set(data, key.split("."), value)
    return build(Config, data)
