"""The API's argument checks: each accepts what its docstring says, refuses the rest with a UsageError that
starts with the parameter's name, and shows the bad value."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from xmask_cli import arguments as a
from xmask_cli.config import ModelSection
from xmask_cli.errors import UsageError, XMaskError


def _refuses(fn, *args, starts: str, **kw) -> str:
    with pytest.raises(UsageError) as e:
        fn(*args, **kw)
    text = str(e.value)
    assert text.startswith(starts), text
    assert e.value.exit_code == 2 and isinstance(e.value, XMaskError)
    return text


def test_int_arg_takes_python_and_numpy_ints_and_refuses_bools_floats_and_small_values():
    assert a.int_arg("heads", 4) == 4 and a.int_arg("heads", np.int64(4)) == 4
    assert type(a.int_arg("heads", np.int32(2))) is int
    for bad in (True, 4.0, "4", None, [4]):
        _refuses(a.int_arg, "heads", bad, starts="heads: expected an int; got ")
    assert _refuses(a.int_arg, "k", 0, minimum=1, starts="k: ") == "k: expected an int >= 1; got 0"


def test_float_arg_ranges_open_and_closed_and_nan():
    assert a.float_arg("p", 0, low=0, high=1, high_open=True) == 0.0
    assert a.float_arg("p", np.float32(0.5), low=0, high=1) == 0.5
    assert "in [0, 1)" in _refuses(a.float_arg, "p", 1.0, low=0, high=1, high_open=True, starts="p: ")
    assert "in (0, 1)" in _refuses(a.float_arg, "eps", 0.0, low=0, high=1, low_open=True, high_open=True,
                                   starts="eps: ")
    _refuses(a.float_arg, "p", float("nan"), low=0, starts="p: ")
    for bad in (True, "0.5", None):
        _refuses(a.float_arg, "p", bad, starts="p: expected a number; got ")


def test_bool_str_choice_and_callable():
    assert a.bool_arg("resume", False) is False and a.bool_arg("offline", None, optional=True) is None
    for bad in (0, 1, "yes"):
        _refuses(a.bool_arg, "resume", bad, starts="resume: expected True or False; got ")
    assert a.str_arg("name", "x") == "x" and a.str_arg("name", None, optional=True) is None
    _refuses(a.str_arg, "name", "", starts="name: expected a non-empty string; got ''")
    _refuses(a.str_arg, "attr", "a b", pattern=r"\w+", starts="attr: ")
    assert a.choice_arg("norm", "pre", ("post", "pre")) == "pre"
    assert _refuses(a.choice_arg, "norm", "mid", ("post", "pre"), starts="norm: ") == \
        "norm: expected one of 'post', 'pre'; got 'mid'"
    _refuses(a.choice_arg, "v", True, (1, 2), starts="v: ")  # True == 1, but it is not the int choice 1
    assert a.callable_arg("log", print) is print
    _refuses(a.callable_arg, "log", "print", starts="log: expected a callable; got 'print'")


def test_literal_choices_are_the_config_schemas():
    assert a.literal_choices(ModelSection, "norm") == ("post", "pre", "none")
    assert a.literal_choices(ModelSection, "mask_scale") == ("paper", "none")


def test_paths(tmp_path: Path):
    assert a.path_arg("path", str(tmp_path)) == tmp_path and a.path_arg("path", tmp_path) == tmp_path
    assert a.optional_path_arg("runs_dir", None) is None
    for bad in (123, "", "a\x00b", b"/tmp"):
        _refuses(a.path_arg, "path", bad, starts="path: expected a path")
    assert _refuses(a.optional_path_arg, "runs_dir", 123, starts="runs_dir: ") == \
        "runs_dir: expected a path (a str or os.PathLike) or None; got 123"


def test_seeds_ints_and_strs():
    assert a.seeds_arg("seeds", 3) == [3] and a.seeds_arg("seeds", [0, np.int64(2)]) == [0, 2]
    assert a.seeds_arg("seeds", "0-4") == "0-4"  # the sweep parser reads the text
    text = _refuses(a.seeds_arg, "seeds", [0, "x"], starts="seeds: ")
    assert text == "seeds: expected an int, a range text such as '0-4' or a list of ints; got [0, 'x']"
    for bad in (True, [], [-1], -2, 1.5, " "):
        _refuses(a.seeds_arg, "seeds", bad, starts="seeds: ")
    assert a.ints_arg("head_powers", (1, 2), minimum=0) == [1, 2] and a.ints_arg("head_powers", None) is None
    _refuses(a.ints_arg, "head_powers", [1, -1], minimum=0, starts="head_powers: expected a non-empty list of ints >= 0")
    assert a.strs_arg("parts", "val", choices=("val", "test")) == ("val",)
    _refuses(a.strs_arg, "parts", ["val", "dev"], choices=("val", "test"), starts="parts: ")


def test_overrides_and_reworded_cli_errors():
    assert a.overrides_arg("overrides", "model.hidden=16") == ["model.hidden=16"]
    assert a.overrides_arg("overrides", {"model.hidden": 16}) == {"model.hidden": 16}
    for bad in (5, ["model.hidden"], {1: 2}):
        _refuses(a.overrides_arg, "overrides", bad, starts="overrides: ")
    with pytest.raises(UsageError) as e, a.as_parameter("seeds", "--seeds"):
        raise UsageError("--seeds '0-': expected N")
    assert str(e.value) == "seeds: '0-': expected N"
    with pytest.raises(UsageError, match="^other$"), a.as_parameter("seeds", "--seeds"):
        raise UsageError("other")  # a message that does not name the flag is left as it is
