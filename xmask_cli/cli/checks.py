"""The config checks that layers above the schema own, registered for every command before it resolves a preset.

:mod:`xmask_cli.config_resolve` (a leaf) runs the checks registered with it; the bias registry and the
``tune:`` space register theirs when imported. A command may resolve a preset before either is imported
(``xmask presets show``, ``xmask prepare``), so the CLI registers forwarders that import the owner when a
section needs it: a config without learned biases still resolves without loading torch.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["register_config_checks"]


def _bias_type(section: Any, need: Callable[[bool, str, str], None]) -> None:
    from xmask_cli.model.biases import check_bias_type  # loads torch: only for a config with a learned bias

    check_bias_type(section, need)


def _tune(cfg: Any, need: Callable[[bool, str, str], None]) -> None:
    from xmask_cli.tune.space import check_section

    check_section(cfg, need)


def register_config_checks() -> None:
    """Register the forwarders (under the owners' names, so an owner imported later replaces its own)."""
    from xmask_cli.config import BiasSection, Config
    from xmask_cli.config_resolve import register_check

    register_check(BiasSection, "bias type", _bias_type)
    register_check(Config, "tune", _tune)
