"""Shared option groups: spread into a command's options, gathered back into one object."""
from __future__ import annotations

import json
from pathlib import Path

import typer
from typer.testing import CliRunner

from xmask_cli.api import choose_preset
from xmask_cli.cli.options import DataOptions, DeviceOpt, RunOptions, options


def _probe() -> typer.Typer:
    """A one-command app whose command prints what it received."""
    app = typer.Typer()

    def probe(name: str, run: RunOptions = RunOptions(), device: DeviceOpt = "auto",
              data: DataOptions = DataOptions()) -> None:
        typer.echo(json.dumps({"name": name, "run": [run.preset, run.dataset, run.set_], "device": device,
                               "data": [str(data.data_root), str(data.cache_dir), data.offline]}))

    app.command()(options(probe))
    return app


def test_groups_become_options_and_come_back_whole(tmp_path: Path):
    r = CliRunner().invoke(_probe(), ["x", "--dataset", "cora", "--set", "a.b=1", "--set", "c=2", "--device", "cpu",
                                      "--cache-dir", str(tmp_path), "--offline"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout) == {"name": "x", "run": [None, "cora", ["a.b=1", "c=2"]], "device": "cpu",
                                    "data": ["None", str(tmp_path), True]}
    # Every field of both groups is an option of the command, in the groups' order, with the shared help.
    help_text = CliRunner().invoke(_probe(), ["--help"], env={"COLUMNS": "200"}).stdout
    names = ["--preset", "--dataset", "--set", "--device", "--data-root", "--cache-dir", "--offline"]
    assert all(n in help_text for n in names)
    assert [help_text.index(n) for n in names] == sorted(help_text.index(n) for n in names)


def test_data_options_resolve_the_cache_folder_and_the_offline_flag(tmp_path: Path, monkeypatch):
    monkeypatch.setenv("XMASK_CACHE", str(tmp_path / "env-cache"))
    assert DataOptions().cache() == tmp_path / "env-cache"
    assert DataOptions(cache_dir=tmp_path / "c").cache() == tmp_path / "c"
    assert DataOptions().no_download is None and DataOptions(offline=True).no_download is True


def test_run_options_choose_as_the_api_does():
    run = RunOptions(dataset="cora", set_=["model.hidden=32"])
    assert run.choose("train.epochs=3") == choose_preset(None, "cora", ["model.hidden=32", "train.epochs=3"])
    cfg = run.config()
    assert cfg.data.dataset == "Cora" and cfg.model.hidden == 32
    assert RunOptions().choose() == ("graph-level", [])
