"""Presets: inheritance, dotted overrides, schema validation, packaging."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from xmask_cli import config_resolve as R
from xmask_cli.errors import ConfigError, UsageError

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def preset_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    d = tmp_path / "presets"
    d.mkdir()
    (d / "parent.yaml").write_text(textwrap.dedent("""
        structure:
          powers: {k: 3, normalization: sym}
          spd: {max_distance: 5}
    """))
    (d / "child.yaml").write_text(textwrap.dedent("""
        extends: parent
        data: {dataset: PROTEINS}
        structure:
          spd: {enabled: false}
    """))
    (d / "loop-a.yaml").write_text("extends: loop-b\n")
    (d / "loop-b.yaml").write_text("extends: loop-a\n")
    monkeypatch.setenv("XMASK_PRESETS", str(d))
    return d


def test_extends_merges_deeply_child_wins(preset_dir: Path):
    cfg = R.resolve("child")
    assert cfg.data.dataset == "PROTEINS"
    assert cfg.structure.powers.k == 3  # from the parent
    assert cfg.structure.spd.enabled is False  # the child's
    assert cfg.structure.spd.max_distance == 5  # parent's sibling key survives the merge


def test_preset_by_path_and_relative_extends(tmp_path: Path, preset_dir: Path):
    sub = tmp_path / "elsewhere"
    sub.mkdir()
    (sub / "local.yaml").write_text("extends: ../presets/parent.yaml\nstructure: {powers: {k: 2}}\n")
    cfg = R.resolve(str(sub / "local.yaml"))
    assert cfg.structure.powers.k == 2
    assert cfg.structure.spd.max_distance == 5


def test_extends_cycle_is_an_error(preset_dir: Path):
    with pytest.raises(ConfigError, match="extends itself"):
        R.resolve("loop-a")


@pytest.mark.parametrize(
    "override, path, expected",
    [
        ("structure.powers.k=6", ("structure", "powers", "k"), 6),
        ("structure.powers.eps=1e-20", ("structure", "powers", "eps"), 1e-20),  # YAML 1.1 reads this as a string
        ("structure.powers.eps=0.001", ("structure", "powers", "eps"), 0.001),
        ("structure.large.tau=0", ("structure", "large", "tau"), 0.0),  # int accepted for float
        ("structure.spd.enabled=false", ("structure", "spd", "enabled"), False),
        ("structure.powers.normalization=no-symnorm", ("structure", "powers", "normalization"), "no-symnorm"),
        ("data.root=/data/x", ("data", "root"), "/data/x"),
        ("data.root=null", ("data", "root"), None),
    ],
)
def test_set_overrides_are_typed(override, path, expected):
    cfg = R.resolve("graph-level", [override]).to_dict()
    for p in path:
        cfg = cfg[p]
    assert cfg == expected and type(cfg) is type(expected)


def test_list_values_parse():
    assert R.parse_override("a.b=[1, 2, 3]") == (["a", "b"], [1, 2, 3])
    assert R.coerce([1, 2], list[int], "x") == [1, 2]
    with pytest.raises(ConfigError, match=r"x\[1\]: expected int"):
        R.coerce([1, "two"], list[int], "x")


def test_unknown_key_names_the_nearest_valid_key():
    with pytest.raises(ConfigError, match=r"unknown key 'structure\.powers\.kk': did you mean 'structure\.powers\.k'\?"):
        R.resolve("graph-level", ["structure.powers.kk=3"])
    with pytest.raises(ConfigError, match=r"unknown key 'strcture'.*'structure'"):
        R.resolve("graph-level", ["strcture.powers.k=3"])


@pytest.mark.parametrize(
    "override, message",
    [
        ("structure.powers.k=abc", r"structure\.powers\.k: expected int, got 'abc'"),
        ("structure.powers.k=2.5", r"structure\.powers\.k: expected int"),
        ("structure.spd.enabled=3", r"structure\.spd\.enabled: expected bool"),
        ("structure.powers.normalization=rw", r"structure\.powers\.normalization: expected one of 'sym', 'no-symnorm'"),
        ("structure.powers.k=0", r"structure\.powers\.k: must lie in \[1, 16\]"),
        ("structure.powers=3", r"structure\.powers: expected a mapping"),
    ],
)
def test_wrong_type_names_key_and_expected_type(override, message):
    with pytest.raises(ConfigError, match=message):
        R.resolve("graph-level", [override])


@pytest.mark.parametrize(
    "override, message",
    [
        ("train.epochs=0", r"^train\.epochs: must be >= 1$"),
        ("train.lr=-0.1", r"^train\.lr: must be >= 0$"),
        ("train.log_cache_mb=-1", r"^train\.log_cache_mb: must be >= 0 \(MB; 0 keeps no log-mask\)$"),
        ("node.query_batch=-1", r"^node\.query_batch: must be >= 0 \(0: all training nodes per step\)$"),
        ("model.ffn_mult=0", r"^model\.ffn_mult: must be >= 1$"),
        ("model.biases=[{type: spd, width: 0}]", r"^model\.biases\[0\]\.width: must be >= 1$"),
        ("structure.large.tau=-1", r"^structure\.large\.tau: must be >= 0$"),
        ("structure.spectrum.num_eigs=0", r"^structure\.spectrum\.num_eigs: must be >= 1$"),
        ("structure.spd.max_distance=255", r"^structure\.spd\.max_distance: must lie in \[1, 254\]$"),
        ("structure.rrwp.steps=65", r"^structure\.rrwp\.steps: must lie in \[1, 64\]$"),
        ("structure.powers.k=16", None),
        ("train.warmup_epochs=0", None),
    ],
)
def test_bounds_name_the_key_and_the_bound(override, message):
    """Each bound holds at its edge and fails one step past it, with the key and the bound in the message."""
    if message is None:
        R.resolve("graph-level", [override])
        return
    with pytest.raises(ConfigError, match=message):
        R.resolve("graph-level", [override])


def test_malformed_set_and_unknown_preset():
    with pytest.raises(ConfigError, match="expected KEY=VALUE"):
        R.resolve("graph-level", ["structure.powers.k"])
    with pytest.raises(UsageError, match="unknown preset 'graph-levl': did you mean 'graph-level'"):
        R.resolve("graph-levl")


def test_shipped_presets_all_validate():
    names = R.list_presets()
    assert {"base", "node-level", "graph-level"} <= set(names)
    for name in names:
        R.resolve(name)


def test_presets_found_after_plain_non_editable_install(tmp_path: Path):
    """A wheel install (not editable) must carry presets/ inside the package."""
    target = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation", "--target", str(target), str(REPO)],
        check=True, capture_output=True, cwd=tmp_path,
    )
    code = "import xmask_cli, xmask_cli.config_resolve as R; print(xmask_cli.__file__); print(sorted(R.list_presets())); R.resolve('node-level')"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = str(target)
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True, cwd=tmp_path, env=env).stdout
    lines = out.splitlines()
    assert lines[0].startswith(str(target)), "imported the source tree, not the installed copy"
    assert "graph-level" in lines[1] and "node-level" in lines[1]
    # The installed presets are presets/'s, nothing else: the recipes of benchmarks/presets/ stay in the repository.
    shipped = sorted(p.stem for p in (REPO / "presets").glob("*.yaml"))
    assert lines[1] == str(shipped)
    kept = {p.name for p in (REPO / "benchmarks" / "presets").glob("*.yaml")}
    assert kept and not [p for p in target.rglob("*.yaml") if p.name in kept]
    assert (target / "xmask_cli" / "data" / "embedded" / "Cora" / "raw" / "ind.cora.graph").is_file()
    # Every subpackage of the source tree is in the wheel (setup.py finds them; none is listed by hand).
    missing = [str(p.parent.relative_to(REPO)) for p in sorted((REPO / "xmask_cli").rglob("__init__.py"))
               if not (target / p.relative_to(REPO)).is_file()]
    assert not missing, f"packages missing from the installed copy (setup.py's find_packages): {missing}"


@pytest.mark.parametrize("override", ["train.lr=inf", "train.lr=.inf", "train.lr=nan", "train.lr=-inf",
                                      "model.dropout=nan", "structure.large.tau=inf", "link.fractions=[0.5,nan,0.5]"])
def test_non_finite_numbers_are_refused(override):
    """`--set train.lr=inf` trained to NaN and exited 0."""
    with pytest.raises(ConfigError, match="finite"):
        R.resolve("graph-level", [override])


@pytest.mark.parametrize("override, key", [("train.weight_decay=-1", "weight_decay"),
                                           ("train.warmup_epochs=-2", "warmup_epochs")])
def test_negative_optimiser_settings_are_refused(override, key):
    """AdamW raised (exit 1) on a negative weight decay that `presets show` accepted."""
    with pytest.raises(ConfigError, match=key):
        R.resolve("graph-level", [override])


def _alias_bomb(levels: int) -> str:
    """A preset of ``levels`` anchors of 10 aliases each, the last one the value of model.head_powers
    (10**levels values once expanded, a few hundred bytes on disk)."""
    lines = ["defs:", "  - &l0 [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]"]
    lines += [f"  - &l{i} [{', '.join([f'*l{i - 1}'] * 10)}]" for i in range(1, levels - 1)]
    lines += ["model:", f"  head_powers: [{', '.join([f'*l{levels - 2}'] * 10)}]"]
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("levels", [5, 7, 8])
def test_a_yaml_alias_bomb_is_exit_2_at_once_with_a_short_message(tmp_path: Path, levels: int):
    import time

    from tests.cli_helpers import one_error_line, run

    bomb = tmp_path / "bomb.yaml"
    bomb.write_text(_alias_bomb(levels))
    assert len(bomb.read_bytes()) < 500
    t0 = time.perf_counter()
    r = run("presets", "show", str(bomb))
    elapsed = time.perf_counter() - t0
    assert r.exit_code == 2
    line = one_error_line(r)
    assert "too large for a preset" in line and str(bomb) in line
    assert len(line) < 400
    assert elapsed < 1.0, elapsed


def test_a_value_quoted_in_an_error_is_cut_to_about_200_characters(tmp_path: Path):
    """Within the bound (1000 ints through aliases, a type error): the message quotes the start of the value only."""
    from tests.cli_helpers import one_error_line, run

    p = tmp_path / "big.yaml"
    p.write_text("model:\n  heads: [&a [" + ", ".join(["1234"] * 100) + "]" + ", *a" * 9 + "]\n")
    r = run("presets", "show", str(p))
    assert r.exit_code == 2
    line = one_error_line(r)
    assert "model.heads: expected int" in line and "characters)" in line
    assert len(line) < 400


@pytest.mark.parametrize("text", [
    "model:\n  head_powers: " + "[" * 100_000 + "]" * 100_000 + "\n",
    "model:\n" + "".join(" " * (i + 1) + f"k{i}:\n" for i in range(3000)) + " " * 3001 + "v: 1\n",
    "a: &a [*a]\n",  # an alias to itself: infinite once expanded
])
def test_deep_nesting_is_exit_2_with_one_line(tmp_path: Path, text: str):
    from tests.cli_helpers import one_error_line, run

    p = tmp_path / "deep.yaml"
    p.write_text(text)
    r = run("presets", "show", str(p))
    assert r.exit_code == 2, r.stderr[-300:]
    assert "too large for a preset" in one_error_line(r)
    r = run("train", "--set", "model.head_powers=" + "[" * 5000 + "]" * 5000)
    assert r.exit_code == 2 and "too large" in one_error_line(r)


def test_the_bound_counts_expanded_nodes_exactly_at_the_limit():
    """Independent count: a flat list of n scalars is n + 1 nodes (+ the mapping, its key): just under and over."""
    n = R.MAX_YAML_NODES - 3  # root mapping, key, list node, n scalars
    assert len(R.load_yaml_bounded("x: [" + ", ".join(["1"] * n) + "]")["x"]) == n
    with pytest.raises(R.YamlTooLarge):
        R.load_yaml_bounded("x: [" + ", ".join(["1"] * (n + 1)) + "]")
    nested = "x: " + "[" * (R.MAX_YAML_DEPTH - 1) + "]" * (R.MAX_YAML_DEPTH - 1)  # depth: mapping 1, lists 2..32
    assert R.load_yaml_bounded(nested) is not None
    with pytest.raises(R.YamlTooLarge):
        R.load_yaml_bounded("x: " + "[" * R.MAX_YAML_DEPTH + "]" * R.MAX_YAML_DEPTH)
