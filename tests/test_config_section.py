"""A config section's own check: bounds, ``Literal`` choices and its own rules, each refused with the one config
error (exit 2) naming the key, each bound itself accepted."""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import ClassVar, Literal

import pytest

from xmask_cli.config_section import FLOAT32_MAX, INT64_MAX, Need, Section, needer
from xmask_cli.errors import ConfigError


@dataclass(frozen=True)
class _Toy(Section):
    """A section of every kind of field :meth:`Section.check` reads."""

    AT_LEAST: ClassVar = {"layers": 1, "hidden": (2, "two heads at least")}
    WITHIN: ClassVar = {"dropout": (0.0, 0.5)}

    layers: int = 1
    hidden: int = 2
    dropout: float = 0.0
    norm: Literal["pre", "post"] = "pre"
    acts: list[Literal["relu", "gelu"]] = field(default_factory=lambda: ["relu"])
    low: int = 0
    high: int = 0

    def _check_own(self, need: Need, at: Callable[[str], str]) -> None:
        need(self.low <= self.high, "low", f"must be <= {at('high')}")


def _refusal(section: _Toy, where: str = "model") -> ConfigError:
    with pytest.raises(ConfigError) as info:
        section.check(where)
    assert info.value.exit_code == 2
    return info.value


def test_the_bounds_themselves_pass() -> None:
    """Every field at its bound (the lowest, both ends of a range) passes."""
    _Toy().check("model")
    _Toy(layers=1, hidden=2, dropout=0.5, norm="post", acts=["gelu", "relu"], low=3, high=3).check("model")


@pytest.mark.parametrize(("change", "message"), [
    ({"layers": 0}, "model.layers: must be >= 1"),
    ({"hidden": 1}, "model.hidden: must be >= 2 (two heads at least)"),
    ({"dropout": -0.01}, "model.dropout: must lie in [0.0, 0.5]"),
    ({"dropout": 0.51}, "model.dropout: must lie in [0.0, 0.5]"),
    ({"norm": "mid"}, "model.norm: must be one of ('pre', 'post'), got 'mid'"),
    ({"acts": ["relu", "tanh"]}, "model.acts[1]: must be one of ('relu', 'gelu'), got 'tanh'"),
    ({"low": 4, "high": 3}, "model.low: must be <= model.high"),
])
def test_a_value_past_its_bound_is_the_config_error_naming_the_key(change: dict, message: str) -> None:
    assert str(_refusal(replace(_Toy(), **change))) == message


def test_messages_follow_where_the_section_sits() -> None:
    """Nested at ``model.biases[0]``: the full key; at ``""`` (a view built in Python): the bare key."""
    assert str(_refusal(_Toy(layers=0), "model.biases[0]")) == "model.biases[0].layers: must be >= 1"
    assert str(_refusal(_Toy(layers=0), "")) == "layers must be >= 1"
    assert str(_refusal(_Toy(low=1), "")) == "low must be <= high"


def test_needer_raises_only_when_the_condition_fails() -> None:
    need = needer("train")
    need(True, "epochs", "must be >= 1")
    with pytest.raises(ConfigError, match=r"^train\.epochs: must be >= 1$"):
        need(False, "epochs", "must be >= 1")


@dataclass(frozen=True)
class _Capped(Section):
    AT_MOST: ClassVar = {"width": 64, "heads": (8, "eight at most")}

    width: int = 64
    heads: int = 8
    rate: float = 1.0
    rates: list[float] = field(default_factory=lambda: [0.5])
    steps: int | None = None


def test_an_upper_bound_is_itself_accepted_and_one_past_it_refused() -> None:
    _Capped().check("model")
    assert str(_refusal(_Capped(width=65))) == "model.width: must be <= 64"
    assert str(_refusal(_Capped(heads=9))) == "model.heads: must be <= 8 (eight at most)"


def _torch_takes_float(v: float) -> bool:
    """The oracle: torch's own conversion of a Python float to a float32 scalar (as the optimizer's ``alpha``)."""
    import torch

    try:
        torch.zeros(1).add_(torch.zeros(1), alpha=v)
    except RuntimeError:
        return False
    return True


@pytest.mark.parametrize("v", [1e38, FLOAT32_MAX, -FLOAT32_MAX, math.nextafter(FLOAT32_MAX, math.inf), 3.41e38,
                               1e39, -1e39, 1e300, 1e-300])
def test_a_float_is_accepted_exactly_when_float32_holds_it(v: float) -> None:
    """Every float field (plain, in a list) is refused where torch's float32 conversion overflows, and only there."""
    for section, key in ((_Capped(rate=v), "rate"), (_Capped(rates=[0.5, v]), "rates[1]")):
        if _torch_takes_float(v):
            section.check("train")
        else:
            err = _refusal(section, "train")
            assert str(err).startswith(f"train.{key}: {v:g} is not finite in float32")
            assert err.keys == {f"train.{key}"}


def test_an_integer_beyond_int64_is_refused() -> None:
    import torch

    _Capped(steps=INT64_MAX).check("x")
    assert int(torch.tensor(INT64_MAX)) == INT64_MAX  # the oracle: torch holds the bound, not one past it
    with pytest.raises((RuntimeError, ValueError, OverflowError)):
        torch.tensor(INT64_MAX + 1)
    assert str(_refusal(_Capped(steps=INT64_MAX + 1), "x")) == f"x.steps: {INT64_MAX + 1} does not fit int64, the dtype it is used in"


def test_a_failed_check_carries_the_keys_it_named() -> None:
    err = _refusal(_Toy(low=4, high=3))
    assert err.keys == {"model.low", "model.high"}
    assert _refusal(_Toy(layers=0)).keys == {"model.layers"}
