"""Preset files: ``extends:`` graphs load in time linear in their files, bounded, with every malformed
input refused as exit 2 naming the file."""
from __future__ import annotations

from pathlib import Path

import pytest

from tests.cli_helpers import one_error_line, run
from xmask_cli import config_presets as P
from xmask_cli.config_resolve import resolve
from xmask_cli.errors import ConfigError


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """Every preset file read, in order (read_yaml wrapped)."""
    seen: list[Path] = []
    real = P.read_yaml

    def counting(path: Path) -> dict:
        seen.append(path.resolve())
        return real(path)

    monkeypatch.setattr(P, "read_yaml", counting)
    return seen


def _diamond(tmp_path: Path, levels: int) -> Path:
    """e0 .. e{levels}: each file extends the next one twice (a diamond at every level), 2^levels paths to the last."""
    for i in range(levels):
        (tmp_path / f"e{i}.yaml").write_text(f"extends: [e{i + 1}.yaml, e{i + 1}.yaml]\ndescription: level {i}\n"
                                             f"train: {{epochs: {i + 1}}}\n" if i < 3 else
                                             f"extends: [e{i + 1}.yaml, e{i + 1}.yaml]\n")
    (tmp_path / f"e{levels}.yaml").write_text("model: {hidden: 32}\ntrain: {epochs: 99, lr: 0.005}\n")
    return tmp_path / "e0.yaml"


def test_a_25_level_diamond_reads_each_file_once(tmp_path: Path, reads: list[Path]) -> None:
    """2^25 paths reach the last file; each of the 26 files is read exactly once, and the merge is the
    chain's (nearest file wins: e0's description and epochs, the root's width and rate)."""
    cfg = resolve(str(_diamond(tmp_path, 25)))
    assert sorted(reads) == sorted((tmp_path / f"e{i}.yaml").resolve() for i in range(26))
    assert (cfg.description, cfg.train.epochs, cfg.model.hidden, cfg.train.lr) == ("level 0", 1, 32, 0.005)


def test_the_cli_shows_the_diamond(tmp_path: Path) -> None:
    r = run("presets", "show", str(_diamond(tmp_path, 25)))
    assert r.exit_code == 0, r.stderr
    assert "hidden: 32" in r.stdout


def test_a_shared_parent_is_not_a_cycle_but_a_loop_is(tmp_path: Path) -> None:
    (tmp_path / "base.yaml").write_text("model: {hidden: 16}\n")
    (tmp_path / "a.yaml").write_text("extends: base.yaml\n")
    (tmp_path / "top.yaml").write_text("extends: [a.yaml, base.yaml]\n")
    assert resolve(str(tmp_path / "top.yaml")).model.hidden == 16
    (tmp_path / "base.yaml").write_text("extends: top.yaml\n")
    with pytest.raises(ConfigError, match=r"extends itself through top -> a -> base -> top"):
        resolve(str(tmp_path / "top.yaml"))


def test_too_deep_and_too_many_files_are_refused(tmp_path: Path, reads: list[Path]) -> None:
    depth = P.MAX_EXTENDS_DEPTH
    for i in range(depth + 1):
        (tmp_path / f"d{i}.yaml").write_text(f"extends: d{i + 1}.yaml\n" if i < depth else "{}\n")
    with pytest.raises(ConfigError, match=rf"chains longer than {depth} presets"):
        P.load_preset_dict(str(tmp_path / "d0.yaml"))
    assert len(reads) == depth  # refused before reading further
    P.load_preset_dict(str(tmp_path / "d1.yaml"))  # exactly at the bound: depth files
    wide = P.MAX_PRESET_FILES
    for i in range(wide):
        (tmp_path / f"w{i}.yaml").write_text("{}\n")
    (tmp_path / "wide.yaml").write_text("extends: [" + ", ".join(f"w{i}.yaml" for i in range(wide)) + "]\n")
    with pytest.raises(ConfigError, match=rf"more than {wide} preset files"):
        P.load_preset_dict(str(tmp_path / "wide.yaml"))
    (tmp_path / "wide.yaml").write_text("extends: [" + ", ".join(f"w{i}.yaml" for i in range(wide - 1)) + "]\n")
    P.load_preset_dict(str(tmp_path / "wide.yaml"))  # the file itself and wide - 1 parents: at the bound


@pytest.mark.parametrize(("text", "shown"), [
    ("extends: 42\n", "got 42 (int)"),
    ("extends: {graph-level: 1}\n", "got {'graph-level': 1} (dict)"),
    ("extends: [graph-level, 3]\n", "got ['graph-level', 3] (list)"),
    ("extends: ['']\n", "got [''] (list)"),
])
def test_extends_must_be_a_name_or_a_list_of_names(tmp_path: Path, text: str, shown: str) -> None:
    p = tmp_path / "bad.yaml"
    p.write_text(text)
    r = run("presets", "show", str(p))
    assert r.exit_code == 2
    assert one_error_line(r) == f"error: {p}: extends must be a preset name or a list of names, {shown}"


@pytest.mark.parametrize("through_extends", [False, True])
def test_a_preset_that_is_not_utf8_is_exit_2_naming_the_file(tmp_path: Path, through_extends: bool) -> None:
    bad = tmp_path / "latin1.yaml"
    bad.write_bytes("description: caf\u00e9\n".encode("latin-1"))
    top = tmp_path / "top.yaml"
    top.write_text("extends: latin1.yaml\n")
    r = run("presets", "show", str(top if through_extends else bad))
    assert r.exit_code == 2
    assert one_error_line(r) == f"error: {bad}: not UTF-8 text (byte {len('description: caf')}); a preset is a UTF-8 YAML file"
    r = run("train", "--preset", str(top), "--runs-dir", str(tmp_path / "runs"))
    assert r.exit_code == 2 and not (tmp_path / "runs").exists()


def test_the_loaded_mapping_is_the_callers_own(tmp_path: Path) -> None:
    """Two children of one parent get separate copies: changing one result leaves the next load alone."""
    (tmp_path / "p.yaml").write_text("model: {hidden: 16}\n")
    (tmp_path / "c.yaml").write_text("extends: [p.yaml, p.yaml]\n")
    first = P.load_preset_dict(str(tmp_path / "c.yaml"))
    first["model"]["hidden"] = 8
    assert P.load_preset_dict(str(tmp_path / "c.yaml"))["model"]["hidden"] == 16
