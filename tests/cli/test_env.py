"""`xmask env`: what a bug report quotes, the same record every run's config.json holds."""
from __future__ import annotations

import importlib.metadata as md
import json
import platform

import torch

from tests.cli_helpers import one_error_line, run
from xmask_cli.versions import OTHER_PACKAGES, environment


def test_env_json_is_the_run_record_and_the_other_packages():
    r = run("env", "--device", "cpu", "--format", "json")
    assert r.exit_code == 0, r.stderr
    got = json.loads(r.stdout)
    assert {k: v for k, v in got.items() if k != "other_packages"} == environment("cpu")
    assert got["versions"]["torch"] == md.version("torch") and got["versions"]["python"] == platform.python_version()
    assert got["threads"]["torch"] == torch.get_num_threads()
    assert set(got["other_packages"]) == set(OTHER_PACKAGES)
    assert got["other_packages"]["typer"] == md.version("typer")


def test_env_human_names_every_version():
    r = run("env", "--device", "cpu")
    assert r.exit_code == 0, r.stderr
    for name, value in environment("cpu")["versions"].items():
        assert name in r.stdout and value in r.stdout
    assert "threads" in r.stdout and "Examples" in run("env", "--help").stdout


def test_env_refuses_an_unknown_device():
    r = run("env", "--device", "tpu")
    assert r.exit_code == 2 and "expected auto, cpu, cuda or cuda:N" in one_error_line(r)
