"""The public API checks its arguments at the boundary: a wrong one raises xmask's UsageError (a subclass of
the XMaskError that ``xmask_cli`` exports) naming the parameter, before anything is written."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

import xmask_cli
from xmask_cli import errors
from xmask_cli.nn import XLogSMaskAttention, XLogSMaskBlock
from xmask_cli.transforms import AddLogSMask


def test_the_error_types_are_exported_as_one_family():
    assert xmask_cli.XMaskError is errors.XMaskError and xmask_cli.UsageError is errors.UsageError
    for name in ("UsageError", "ConfigError", "DataNotFoundError", "CacheError", "NotWritableError",
                 "RunNotFoundError", "DivergedError"):
        assert issubclass(getattr(xmask_cli, name), xmask_cli.XMaskError) and name in xmask_cli.__all__


@pytest.mark.parametrize("kw, starts", [
    ({"seeds": [0, "x"]}, "seeds: expected an int, a range text such as '0-4' or a list of ints; got [0, 'x']"),
    ({"seeds": "0-"}, "seeds: '0-': expected N, A-B"),
    ({"seeds": [1, 1]}, "seeds: '1,1': a seed appears twice"),
    ({"runs_dir": 123}, "runs_dir: expected a path"),
    ({"cache_dir": 1.5}, "cache_dir: expected a path"),
    ({"device": "tpu"}, "device: 'tpu': expected auto, cpu, cuda or cuda:N"),
    ({"device": None}, "device: expected a non-empty string"),
    ({"overrides": 5}, "overrides: expected 'KEY=VALUE' texts"),
    ({"resume": "yes"}, "resume: expected True or False"),
    ({"offline": 1}, "offline: expected True or False or None"),
    ({"on_epoch": 3}, "on_epoch: expected a callable"),
    ({"name": ""}, "name: expected a non-empty string"),
])
def test_train_refuses_a_bad_argument_by_its_name_before_any_work(tmp_path: Path, monkeypatch, kw, starts):
    monkeypatch.chdir(tmp_path)
    kw = {"runs_dir": tmp_path / "runs", "cache_dir": tmp_path / "cache", **kw}
    with pytest.raises(xmask_cli.UsageError) as e:
        xmask_cli.train("graph-level", **kw)
    assert str(e.value).startswith(starts), str(e.value)
    assert e.value.exit_code == 2
    assert list(tmp_path.iterdir()) == []  # no run folder, no cache


def test_train_refuses_a_config_of_the_wrong_type():
    with pytest.raises(xmask_cli.UsageError, match="^config: expected a preset name, a preset YAML path or a Config"):
        xmask_cli.train(42)


def test_load_run_and_loaded_run_methods_check_their_arguments(tmp_path: Path):
    with pytest.raises(xmask_cli.UsageError, match="^path: expected a path"):
        xmask_cli.load_run(None)
    with pytest.raises(xmask_cli.UsageError, match="^device: "):
        xmask_cli.load_run(tmp_path, device="gpu0")
    with pytest.raises(xmask_cli.UsageError, match="^log: expected a callable"):
        xmask_cli.load_run(tmp_path, log="x")
    # A wrong path that is a path is the CLI's answer: not a run folder, exit 6.
    with pytest.raises(xmask_cli.RunNotFoundError):
        xmask_cli.load_run(tmp_path)


@pytest.mark.parametrize("build, starts", [
    (lambda: XLogSMaskAttention(10, 10, 3), "out_channels: expected a multiple of heads (3) with combine='project'; got 10"),
    (lambda: XLogSMaskAttention(8, 8, 0), "heads: expected an int >= 1; got 0"),
    (lambda: XLogSMaskAttention(8, 8, 2, [1]), "head_powers: expected one power per head (2); got [1]"),
    (lambda: XLogSMaskAttention(8, 8, 2, [1, -1]), "head_powers: expected a non-empty list of ints >= 0"),
    (lambda: XLogSMaskAttention(8, 8, 2, dropout=1.0), "dropout: expected a number in [0, 1); got 1.0"),
    (lambda: XLogSMaskAttention(8, 8, 2, eps=0.0), "eps: expected a number in (0, 1)"),
    (lambda: XLogSMaskAttention(8, 8, 2, attention="gpu"), "attention: expected one of 'auto', 'dense', 'sparse'"),
    (lambda: XLogSMaskAttention(8, 8, 2, mask_scale="half"), "mask_scale: expected one of 'paper', 'none'"),
    (lambda: XLogSMaskBlock(8, 8, 2, norm="mid"), "norm: expected one of 'post', 'pre', 'none'; got 'mid'"),
    (lambda: XLogSMaskBlock(8, 8, 2, ffn_mult=0), "ffn_mult: expected an int >= 1; got 0"),
    (lambda: XLogSMaskBlock(8, 8, 2, residual="yes"), "residual: expected"),
    (lambda: XLogSMaskBlock(8, 8, 2, combine="sum"), "combine: expected one of 'project', 'concat', 'mean'"),
    (lambda: AddLogSMask(k=0), "k: expected an int >= 1; got 0"),
    (lambda: AddLogSMask(k="3"), "k: expected an int >= 1; got '3'"),
    (lambda: AddLogSMask(tau=-1.0), "tau: expected a number in [0, inf)"),
    (lambda: AddLogSMask(attr="a b"), "attr: expected a non-empty string"),
    (lambda: AddLogSMask()(object()), "data: AddLogSMask needs a graph with edge_index"),
])
def test_the_modules_check_their_arguments(build, starts):
    with pytest.raises(xmask_cli.UsageError) as e:
        build()
    assert str(e.value).startswith(starts), str(e.value)


def test_good_arguments_still_build_the_same_modules():
    torch.manual_seed(0)
    attn = XLogSMaskAttention(8, 8, 2, (1, 2), dropout=0.0, eps=1e-6)
    assert list(attn.log_mask.head_powers) == [1, 2]
    assert AddLogSMask(k=3).k == 3


def test_the_documented_error_example_prints_what_it_says(capsys, tmp_path: Path, monkeypatch):
    from tests.test_api import _examples

    monkeypatch.chdir(tmp_path)
    example = next(e for e in _examples() if "except xmask_cli.UsageError" in e)
    exec(compile(example, "docs/python-api.md", "exec"), {})
    printed = capsys.readouterr().out.strip()
    assert printed == example.split("# ", 1)[1].strip()  # the comment beside the print is its output
    assert list(tmp_path.iterdir()) == []
