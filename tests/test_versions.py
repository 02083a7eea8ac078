"""versions: the software record of runs and cache files, read back against importlib.metadata, torch and
numba themselves; the differences between runs; an optional dependency refused with its extra."""
from __future__ import annotations

import importlib.metadata as md
import platform
import sys

import numba
import pytest
import torch

from xmask_cli import versions as V
from xmask_cli.errors import UsageError


def test_package_versions_are_the_installed_metadata():
    got = V.package_versions(("numpy", "scipy", "no-such-package-xyz"))
    assert got["numpy"] == md.version("numpy") and got["scipy"] == md.version("scipy")
    assert got["no-such-package-xyz"] == "not installed"
    # xmask's own version: the distribution xmask-cli (never the index's unrelated `xmask`)
    try:
        want = md.version("xmask-cli")
    except md.PackageNotFoundError:
        want = "0.1.0+src"
    assert got["xmask"] == want == V.xmask_version()


def test_environment_records_versions_device_and_threads():
    env = V.environment("cpu")
    assert set(env["versions"]) == {"xmask", "python", *V.RUN_PACKAGES}
    assert env["versions"]["python"] == platform.python_version()
    assert env["versions"]["torch"] == md.version("torch") and env["versions"]["numba"] == md.version("numba")
    assert env["device"] == {"name": "cpu"}
    assert env["threads"]["torch"] == torch.get_num_threads()
    assert env["threads"]["numba"] == numba.get_num_threads()
    assert env["platform"] == platform.platform()
    auto = V.environment("auto")["device"]["name"]
    assert auto == ("cuda" if torch.cuda.is_available() else "cpu")


def test_a_cuda_device_that_is_not_there_is_named_so():
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    assert V.environment("cuda:1")["device"] == {"name": "cuda:1", "model": "not available"}


def test_version_differences_names_each_package_and_its_runs():
    a = {"versions": {"torch": "2.13.0", "numpy": "2.4.6"}}
    b = {"versions": {"torch": "2.12.0", "numpy": "2.4.6"}}
    records = [("runs/a/0", a), ("runs/a/1", a), ("runs/b/0", b), ("runs/old/0", None), ("runs/odd/0", "x")]
    assert V.version_differences(records) == {"torch": {"2.13.0": ["runs/a/0", "runs/a/1"], "2.12.0": ["runs/b/0"]}}
    assert V.version_differences([("a", a), ("b", dict(a))]) == {}


def test_a_missing_optional_dependency_names_its_extra(monkeypatch):
    # As if not installed: importing it raises ImportError (its submodule too, which earlier tests may have loaded).
    monkeypatch.setitem(sys.modules, "ogb", None)
    monkeypatch.setitem(sys.modules, "ogb.graphproppred", None)
    with pytest.raises(UsageError, match=r'ogbg-molhiv needs ogb, an optional dependency: pip install "xmask-cli\[ogb\]"'):
        V.require_extra("ogb.graphproppred", "ogb", "ogbg-molhiv")
    V.require_extra("json", "none", "anything")  # an installed module passes
