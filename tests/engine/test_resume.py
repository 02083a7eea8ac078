"""Resuming a run: the RNG states come back exactly; the config check names what differs and lets through only
what may change."""
from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from xmask_cli.engine.resume import check_resumable, config_diff, new_setting_at_default, rng_state, set_rng_state
from xmask_cli.errors import UsageError

RUN = SimpleNamespace(path=Path("runs/demo/seed0"))


def test_restored_rng_states_draw_what_an_uninterrupted_run_draws():
    torch.manual_seed(3)
    np.random.seed(3)
    np.random.standard_normal()  # numpy's cached second Gaussian is part of the state
    state = rng_state()
    want = (torch.rand(5), np.random.rand(5), np.random.standard_normal(3))
    torch.rand(7), np.random.rand(11)  # the run goes on, drawing more
    set_rng_state(state)
    got = (torch.rand(5), np.random.rand(5), np.random.standard_normal(3))
    torch.testing.assert_close(got[0], want[0], rtol=0, atol=0)
    np.testing.assert_array_equal(got[1], want[1])
    np.testing.assert_array_equal(got[2], want[2])
    assert not torch.equal(torch.rand(5), want[0])  # and the stream moves on from there


def test_config_diff_names_each_differing_leaf_by_its_dotted_key():
    a = {"a": 1, "b": {"c": 2, "d": 3, "e": [1, 2]}, "f": {"g": 1}}
    b = {"a": 1, "b": {"c": 5, "e": [1, 2]}, "f": 1, "h": None}
    # b.c changed, b.d gone, f a dict on one side only, h missing on the other (a None is still a value).
    assert config_diff(a, b) == ["b.c", "b.d", "f", "h"]
    assert config_diff(a, a) == [] and config_diff({"x": [1, 2]}, {"x": [2, 1]}) == ["x"]


def _saved() -> dict:
    return {"cache_path": "/old/place/abc.h5", "data_root": "/data",
            "train": {"epochs": 10, "lr": 0.001, "device": "cpu"},
            "config": {"train": {"epochs": 10, "lr": 0.001, "loggers": []}, "tune": {"trials": 4}}}


def test_epochs_device_data_root_loggers_tune_and_the_cache_folder_may_change():
    now = _saved()
    now.update(cache_path="/new/place/abc.h5", data_root="/elsewhere")
    now["train"].update(epochs=50, device="cuda")
    now["config"]["train"].update(epochs=50, loggers=["tensorboard"])
    now["config"]["tune"] = {"trials": 99}
    check_resumable(RUN, _saved(), now)  # no error


def test_another_setting_is_refused_naming_it_once():
    now = _saved()
    now["train"]["lr"] = 0.01
    now["config"]["train"]["lr"] = 0.01
    now["cache_path"] = "/old/place/other.h5"  # another cache file (another key) is another input
    with pytest.raises(UsageError) as err:
        check_resumable(RUN, _saved(), now)
    msg = str(err.value)
    assert str(RUN.path) in msg and "cache_path, train.lr;" in msg and msg.count("train.lr") == 1


def test_a_setting_added_since_passes_at_its_default_only():
    saved = _saved()
    saved["config"]["train"].pop("lr")  # a run written before `train.lr` existed
    now = _saved()
    assert new_setting_at_default("config.train.lr", saved, now)  # 0.001 is the default
    check_resumable(RUN, saved, now)
    now["config"]["train"]["lr"] = 0.5
    assert not new_setting_at_default("config.train.lr", saved, now)
    with pytest.raises(UsageError, match="train.lr"):
        check_resumable(RUN, saved, now)
    # A key the run has is never "new", and a key without a default is no setting of xmask's.
    assert not new_setting_at_default("config.train.epochs", saved, now)
    assert not new_setting_at_default("config.train.no_such_key", saved, {"config": {"train": {"no_such_key": 1}}})


def test_more_than_eight_differences_are_counted():
    saved = {"config": {"model": {f"k{i}": i for i in range(11)}}}
    now = {"config": {"model": {f"k{i}": -i - 1 for i in range(11)}}}
    with pytest.raises(UsageError) as err:
        check_resumable(RUN, saved, now)
    # Keys in string order (k10 sorts before k2): the first eight named, the other three counted.
    assert ("in model.k0, model.k1, model.k10, model.k2, model.k3, model.k4, model.k5, model.k6 and 3 more;"
            in str(err.value))


def test_the_software_record_may_change_but_not_a_setting():
    """config.json's ``environment`` (versions, device, threads) describes the session that wrote it: a resume
    on another torch or thread count goes on; a setting beside it still counts."""
    saved = {**_saved(), "environment": {"versions": {"torch": "2.12.0"}, "threads": {"torch": 8}}}
    now = {**_saved(), "environment": {"versions": {"torch": "2.13.0"}, "threads": {"torch": 2}}}
    check_resumable(RUN, saved, now)  # no error
    check_resumable(RUN, _saved(), now)  # a run saved before configs recorded it
    now["train"] = {**now["train"], "lr": 0.5}
    with pytest.raises(UsageError, match="train.lr"):
        check_resumable(RUN, saved, now)


def test_config_json_records_the_environment_and_a_resume_rewrites_it(tmp_path):
    import importlib.metadata as md
    import json
    import platform

    from tests.engine.test_loop import ToyTask
    from xmask_cli.engine.loop import TrainConfig, fit

    cfg = TrainConfig(epochs=2, lr=0.05, warmup_epochs=0, seed=0)
    fit(ToyTask(), torch.nn.Linear(2, 1), cfg, tmp_path / "run", model_config={"toy": 1})
    saved = json.loads((tmp_path / "run" / "config.json").read_text())
    env = saved["environment"]
    assert env["versions"]["torch"] == md.version("torch") and env["versions"]["scipy"] == md.version("scipy")
    assert env["versions"]["python"] == platform.python_version()
    assert env["device"]["name"] == "cpu" and env["threads"]["torch"] == torch.get_num_threads()
    # Another session (here: another recorded torch) resumes the run and records itself.
    (tmp_path / "run" / "config.json").write_text(json.dumps({**saved, "environment": {"versions": {"torch": "0"}}}))
    fit(ToyTask(), torch.nn.Linear(2, 1), TrainConfig(epochs=3, lr=0.05, warmup_epochs=0, seed=0), tmp_path / "run",
        model_config={"toy": 1}, resume=True)
    again = json.loads((tmp_path / "run" / "config.json").read_text())
    assert again["environment"]["versions"] == env["versions"] and again["train"]["epochs"] == 3


@pytest.mark.parametrize("name", ["last.pt", "best.pt"])
def test_resume_refuses_a_checkpoint_copied_from_another_run(tmp_path, name):
    """--resume checks both checkpoints' records against config.json: one copied in from a run of another seed
    is refused, exit 6, naming the setting and both values, before any epoch; the run's own files stay."""
    import shutil

    from tests.engine.test_loop import ToyTask
    from xmask_cli.engine.loop import TrainConfig, fit
    from xmask_cli.errors import RunNotFoundError

    def train(folder: Path, seed: int, epochs: int, **kw) -> None:
        torch.manual_seed(seed)
        fit(ToyTask(), torch.nn.Linear(2, 1), TrainConfig(epochs=epochs, lr=0.05, warmup_epochs=0, seed=seed),
            folder, model_config={"toy": 1}, **kw)

    train(tmp_path / "a", 0, 2)
    train(tmp_path / "b", 1, 2)
    shutil.copy(tmp_path / "b" / name, tmp_path / "a" / name)
    rows = (tmp_path / "a" / "metrics.jsonl").read_text()
    with pytest.raises(RunNotFoundError, match=rf"{name} is not this run's checkpoint: it was trained with "
                                               r"train\.seed = 1, .*config\.json says 0"):
        train(tmp_path / "a", 0, 4, resume=True)
    assert (tmp_path / "a" / "metrics.jsonl").read_text() == rows
    shutil.copy(tmp_path / "b" / name, tmp_path / "b" / "keep")
    shutil.copy(tmp_path / "b" / "keep", tmp_path / "b" / name)
    train(tmp_path / "b", 1, 3, resume=True)  # its own checkpoints resume
    assert len((tmp_path / "b" / "metrics.jsonl").read_text().splitlines()) == 3


def test_check_record_compares_what_the_checkpoint_recorded():
    """Only the record's own settings count: a field config.json alone holds passes, a recorded one that
    differs is named with both values, what --resume may change passes, and no record only warns."""
    import json

    from xmask_cli.engine.resume import check_record
    from xmask_cli.errors import RunNotFoundError

    saved = _saved()
    record = json.dumps(saved)
    check_record(RUN, "best.pt", record, {**saved, "written_by": "xmask 9"})
    check_record(RUN, "best.pt", record, {**saved, "train": {**saved["train"], "epochs": 99}})
    other = {**saved, "train": {**saved["train"], "lr": 0.5}}
    with pytest.raises(RunNotFoundError, match=rf"best.pt is not this run's checkpoint: it was trained with "
                                               rf"train.lr = {saved['train']['lr']}, .*config.json says 0.5"):
        check_record(RUN, "best.pt", record, other)
    warned: list[str] = []
    check_record(RUN, "best.pt", None, other, warned.append)
    assert len(warned) == 1 and warned[0].startswith("warning: ") and "records no config" in warned[0]


def test_a_run_saved_before_model_arch_resumes_as_the_architecture_it_built():
    """config.json's model section gained ``arch``: a run without it resumes when its keys name the same one."""
    from xmask_cli.model.model_config import ModelConfig

    for kw, arch in (({}, "transformer"), ({"ffn": False}, "gat"), ({"experts": ("local",)}, "experts")):
        model = ModelConfig(in_dim=4, out_dim=2, task="node", **kw).to_dict()
        assert model["arch"] == arch
        old = {k: v for k, v in model.items() if k != "arch"}
        check_resumable(RUN, {**_saved(), "model": old}, {**_saved(), "model": model})
        other = "vit" if arch != "vit" else "gat"
        with pytest.raises(UsageError, match="model.arch"):
            check_resumable(RUN, {**_saved(), "model": old}, {**_saved(), "model": {**model, "arch": other}})
