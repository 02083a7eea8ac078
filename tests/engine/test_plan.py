"""The plan of a sweep, before any data is read: seeds, device, level, metric, run name and run folders."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tests.data.test_folder import write_folder
from xmask_cli.config_resolve import resolve
from xmask_cli.data.registry import get_dataset
from xmask_cli.engine.plan import (
    check_planned,
    check_seeds,
    existing_runs,
    make_plan,
    parse_seeds,
    planned_runs,
    resolve_device,
    resolve_level,
    resolve_metric,
    run_name,
    with_folder_ref,
)
from xmask_cli.errors import ConfigError, UsageError


@pytest.mark.parametrize("text, seeds", [(None, [0]), (3, [3]), ("7", [7]), ("0-4", [0, 1, 2, 3, 4]),
                                         ("0,2,7", [0, 2, 7]), ("0-2,9", [0, 1, 2, 9]), (" 1 - 2 ", [1, 2])])
def test_parse_seeds(text, seeds):
    assert parse_seeds(text) == seeds


@pytest.mark.parametrize("text", ["", "a", "-1", "3-1", "0-2,1", "1.5"])
def test_parse_seeds_rejects(text):
    with pytest.raises(UsageError):
        parse_seeds(text)


def test_parse_seeds_bounds():
    """Seeds reach 2^32 - 1 (numpy's global seed) and a sweep holds at most 10000 of them."""
    assert parse_seeds("4294967294-4294967295") == [4294967294, 4294967295]
    with pytest.raises(UsageError, match="must lie in 0..4294967295"):
        parse_seeds("4294967296")
    assert parse_seeds("5-10004") == list(range(5, 10005))  # 10000 seeds
    with pytest.raises(UsageError, match="more than 10000 seeds"):
        parse_seeds("0-9998,20000,20001")  # 9999 + 2


def test_resolve_device():
    assert resolve_device("cpu") == "cpu"
    assert resolve_device(" CPU ") == "cpu"
    assert resolve_device("auto") == ("cuda" if torch.cuda.is_available() else "cpu")
    for bad in ("tpu", "cuda:x", "gpu0"):
        with pytest.raises(UsageError):
            resolve_device(bad)
    if not torch.cuda.is_available():
        with pytest.raises(UsageError, match="not available"):
            resolve_device("cuda")
    else:
        with pytest.raises(UsageError, match="CUDA device"):
            resolve_device(f"cuda:{torch.cuda.device_count()}")


@pytest.mark.parametrize("preset, overrides, level, metric", [
    ("graph-level", [], "graph", "accuracy"),
    ("node-level", [], "node", "accuracy"),
    ("link-level", [], "link", "mrr"),
    ("ogbg-molhiv", [], "graph", "rocauc"),
    ("base", ["data.dataset=cora"], "node", "accuracy"),          # auto: the dataset's first level
    ("base", ["data.dataset=cora", "task.level=link"], "link", "mrr"),
    ("edge-regression", ["edge.file=x.csv"], "edge", "mae"),
    ("edge-regression", ["edge.file=x.csv", "task.metric=rmse"], "edge", "rmse"),
])
def test_level_and_metric(preset, overrides, level, metric):
    cfg = resolve(preset, overrides)
    assert resolve_level(cfg) == level
    assert resolve_metric(cfg, level) == metric


def test_level_and_metric_refusals():
    with pytest.raises(UsageError, match="no node-level task"):
        resolve_level(resolve("graph-level", ["task.level=node"]))
    with pytest.raises(UsageError, match="does not apply"):
        resolve_metric(resolve("node-level", ["task.metric=mrr"]), "node")
    with pytest.raises(ConfigError, match="one power per head"):
        resolve("graph-level", ["model.head_powers=[1,2]"])
    with pytest.raises(ConfigError, match="multiple of model.heads"):
        resolve("graph-level", ["model.hidden=10"])
    with pytest.raises(ConfigError, match="summing to 1"):
        resolve("link-level", ["link.fractions=[0.5,0.5,0.5]"])


def test_the_edge_level_needs_an_edge_file():
    with pytest.raises(UsageError, match="needs an edge-attribute file"):
        resolve_level(resolve("base", ["data.dataset=cora", "task.level=edge"]))


@pytest.mark.parametrize("preset, overrides, name", [
    ("graph-level", [], "mutag-graph"),                              # MUTAG, lower-cased
    ("node-level", [], "cora-node"),
    ("link-level", [], "cora-link"),
    ("base", ["data.dataset=cora", "task.level=link"], "cora-link"),
    ("edge-regression", ["edge.file=x.csv"], "edges-edge"),          # an edge file's runs are "edges"
    ("graph-level", ["run.name=mine"], "mine"),                      # run.name wins
])
def test_run_name(preset, overrides, name):
    assert run_name(resolve(preset, overrides)) == name


def test_a_folder_dataset_is_named_by_its_folder_and_saved_by_its_absolute_path(tmp_path, monkeypatch):
    write_folder(tmp_path / "My Data")
    monkeypatch.chdir(tmp_path)
    cfg = resolve("base", ["data.dataset=./My Data"])
    assert run_name(cfg) == "my data-node"
    assert with_folder_ref(cfg).data.dataset == str(tmp_path / "My Data")
    named = resolve("graph-level")
    assert with_folder_ref(named) is named  # a registry name is kept as it is


def test_planned_runs_list_each_seed_then_its_folds_and_make_nothing(tmp_path):
    root = tmp_path / "runs" / "x"
    plain = [(seed, fold, run.path) for seed, fold, run in planned_runs(root, [3, 1], 0)]
    assert plain == [(3, None, root / "3"), (1, None, root / "1")]
    folds = [(seed, fold, run.path) for seed, fold, run in planned_runs(root, [3, 1], 2)]
    assert folds == [(3, 0, root / "3" / "fold-0"), (3, 1, root / "3" / "fold-1"),
                     (1, 0, root / "1" / "fold-0"), (1, 1, root / "1" / "fold-1")]
    assert not (tmp_path / "runs").exists()


def test_existing_runs_are_found_on_disk_in_fold_order(tmp_path):
    root = tmp_path / "x"
    for name in ("fold-0", "fold-10", "fold-2", "fold-11", "fold-01", "fold-x", "folds"):
        (root / "0" / name).mkdir(parents=True)
    (root / "0" / "fold-1").write_text("a file, not a run folder")
    (root / "2").mkdir()
    # Seed 1 has no folder; seed 2 has one with no folds in it.
    found = [run.path for run in existing_runs(root, [0, 1, 2], 11)]
    assert found == [root / "0" / "fold-0", root / "0" / "fold-2", root / "0" / "fold-10"]  # 11 is past 11 folds
    assert [run.path for run in existing_runs(root, [0, 1, 2], 0)] == [root / "0", root / "2"]
    assert existing_runs(root, [5], 3) == []


def test_check_planned_refuses_folders_holding_a_run_unless_replaced(tmp_path):
    root = tmp_path / "x"
    for seed in ("0", "1", "2"):
        (root / seed).mkdir(parents=True)
    (root / "1" / "summary.json").write_text("{}")
    (root / "2" / "config.json").write_text("{}")
    existing = existing_runs(root, [0, 1, 2], 0)
    with pytest.raises(UsageError, match=f"run folder {root / '1'} exists \\(and 1 more\\); use --resume"):
        check_planned(existing, replace=False)
    check_planned(existing, replace=True)
    check_planned(existing[:1], replace=False)  # an empty folder holds no run
    assert sorted(p.name for p in (root / "0").iterdir()) == []  # nothing made


def test_check_outputs_refuses_what_a_sweep_could_not_write_and_creates_nothing(tmp_path):
    """A file where a seed or fold folder goes is exit 5, a folder at aggregate.json exit 2; folders that do not
    exist yet pass and are not made."""
    from xmask_cli.engine.plan import check_outputs
    from xmask_cli.errors import NotWritableError

    root = tmp_path / "runs" / "x"
    check_outputs(root, [0, 1], 3)
    assert not (tmp_path / "runs").exists()
    (root / "0").mkdir(parents=True)
    (root / "0" / "fold-1").write_text("x")
    check_outputs(root, [0, 1], 0)  # without folds the seed folder's entries are the run's own business
    with pytest.raises(NotWritableError, match=r"run folder .*0/fold-1 is a file, not a folder"):
        check_outputs(root, [0, 1], 3)
    (root / "0" / "fold-1").unlink()
    (root / "1").write_text("x")
    with pytest.raises(NotWritableError, match=r"run folder .*x/1 is a file, not a folder"):
        check_outputs(root, [0, 1], 0)
    (root / "1").unlink()
    (root / "aggregate.json").mkdir()
    with pytest.raises(UsageError, match="aggregate.json is a folder, not a file"):
        check_outputs(root, [0, 1], 0)


def count_lookups(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The names ``data.registry.get_dataset`` is called with from now on, wherever a module bound it by name."""
    import sys

    from xmask_cli.data import registry

    calls: list[str] = []
    real = registry.get_dataset

    def counted(name: str):
        calls.append(name)
        return real(name)

    for module in list(sys.modules.values()):
        if getattr(module, "__name__", "").startswith("xmask_cli") and getattr(module, "get_dataset", None) is real:
            monkeypatch.setattr(module, "get_dataset", counted)
    return calls


def test_make_plan_decides_level_metric_name_and_folder_from_one_lookup(monkeypatch, tmp_path):
    cfg = resolve("base", ["data.dataset=cora", "task.level=link"])
    lookups = count_lookups(monkeypatch)
    plan = make_plan(cfg, [3, 1], run_root=tmp_path)
    assert lookups == ["cora"]
    # Each field is what the one-question functions answer (each looks the dataset up again).
    assert (plan.level, plan.metric, plan.name) == (resolve_level(cfg), resolve_metric(cfg, "link"), run_name(cfg))
    assert (plan.spec, plan.root, plan.seeds, plan.cfg) == (get_dataset("cora"), tmp_path / "cora-link", (3, 1), cfg)
    assert make_plan(cfg).root == Path(cfg.run.root) / "cora-link"  # run.root without run_root


def test_make_plan_reuses_a_given_entry_only_when_it_is_the_configs_dataset(monkeypatch):
    cfg = resolve("graph-level")  # MUTAG
    mutag, proteins = get_dataset("MUTAG"), get_dataset("PROTEINS")  # this module's own lookups are not counted
    assert mutag.ref == cfg.data.dataset
    lookups = count_lookups(monkeypatch)
    assert make_plan(cfg, spec=mutag).spec == mutag
    assert lookups == []  # the entry given is the config's dataset: no lookup
    assert make_plan(cfg, spec=proteins).spec == mutag  # another dataset's entry (data.dataset overridden since)
    assert lookups == [cfg.data.dataset]


def test_make_plan_of_an_edge_file_reads_no_dataset_entry(monkeypatch):
    cfg = resolve("edge-regression", ["edge.file=x.csv"])
    lookups = count_lookups(monkeypatch)
    plan = make_plan(cfg)
    assert (plan.spec, plan.level, plan.metric, plan.name, lookups) == (None, "edge", "mae", "edges-edge", [])


def test_make_plan_names_a_folder_dataset_by_its_absolute_path(tmp_path, monkeypatch):
    write_folder(tmp_path / "g")
    monkeypatch.chdir(tmp_path)
    cfg = resolve("base", ["data.dataset=./g"])
    lookups = count_lookups(monkeypatch)
    plan = make_plan(cfg)
    assert lookups == ["./g"]  # the folder's files are read once
    assert plan.cfg.data.dataset == str(tmp_path / "g") == with_folder_ref(cfg).data.dataset
    assert (plan.name, plan.level) == ("g-node", "node")


def test_make_plan_runs_the_run_stage_rules(tmp_path):
    from xmask_cli.engine.experiment import check_config

    cfg = resolve("graph-level", ["data.folds=3"])
    plan = make_plan(cfg)
    assert check_config(cfg) == (plan.level, plan.metric) == ("graph", "accuracy")
    with pytest.raises(ConfigError, match="data.folds"):
        make_plan(resolve("ogbg-molhiv", ["data.folds=3"]))  # OGB's official split takes no folds


@pytest.mark.parametrize("seeds, message", [([1, 1], "'1,1': a seed appears twice"),
                                            ([2**32], "must lie in 0..4294967295"),
                                            ([-1], "must lie in 0..4294967295"),
                                            (range(10001), "more than 10000 seeds")])
def test_check_seeds_refuses_what_parse_seeds_refuses(seeds, message):
    with pytest.raises(UsageError, match=message):
        check_seeds(list(seeds))
    if min(seeds) >= 0:  # the same seeds as a text: the same refusal
        with pytest.raises(UsageError, match=message.split(": ")[-1]):
            parse_seeds(",".join(map(str, seeds)))
    assert check_seeds((4, 0, 2)) == [4, 0, 2]
