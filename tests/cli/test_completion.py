"""Shell completion: the completion functions on a hand-made runs folder and the preset folders, typer's
completion protocol for bash, zsh and fish run through the real command, and --show-completion's scripts."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cli_helpers import run
from xmask_cli.cli.completion import complete_preset, complete_run_dir
from xmask_cli.config_resolve import list_presets

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def runs_tree(tmp_path, monkeypatch):
    """runs/a/{0,1} (runs), runs/b/0/fold-2 (a fold run), runs/empty/x and runs/.hidden/0 (no run to offer)."""
    for run_dir in ("runs/a/0", "runs/a/1", "runs/b/0/fold-2", "runs/.hidden/0"):
        (tmp_path / run_dir).mkdir(parents=True)
        (tmp_path / run_dir / "config.json").write_text("{}")
    (tmp_path / "runs" / "empty" / "x").mkdir(parents=True)
    (tmp_path / "notes").mkdir()
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_run_folders_complete_level_by_level(runs_tree):
    assert complete_run_dir("") == ["runs/"]
    assert complete_run_dir("ru") == ["runs/"]
    assert complete_run_dir("runs/") == ["runs/a/", "runs/b/"]  # not empty/, not .hidden/
    assert complete_run_dir("runs/a/") == ["runs/a/0", "runs/a/1"]  # runs themselves: no trailing slash
    assert complete_run_dir("runs/b/0/") == ["runs/b/0/fold-2"]
    assert complete_run_dir("runs/.") == ["runs/.hidden/"]
    assert complete_run_dir("nowhere/") == []
    absolute = f"{runs_tree}/runs/a/"
    assert complete_run_dir(absolute) == [absolute + "0", absolute + "1"]


def test_preset_names_complete_from_the_preset_folders():
    names = list(list_presets())
    assert complete_preset("") == names
    assert complete_preset("graph") == [n for n in names if n.startswith("graph")] and "graph-level" in names
    assert complete_preset("no-such") == []


def _complete(shell: str, words: str, cwd: Path) -> str:
    """What ``xmask`` answers the shell's completion request (typer's protocol, environment variables)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "_XMASK_COMPLETE": f"complete_{shell}"}
    if shell == "bash":
        env.update(COMP_WORDS=words, COMP_CWORD=str(len(words.split(" ")) - 1))
    else:
        env.update(_TYPER_COMPLETE_ARGS=words, _TYPER_COMPLETE_FISH_ACTION="get-args")
    code = "import sys; sys.argv[0] = 'xmask'; from xmask_cli.cli import main; main()"
    out = subprocess.run([sys.executable, "-c", code], env=env, cwd=cwd, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return out.stdout


@pytest.mark.slow
def test_the_command_answers_bash_zsh_and_fish(runs_tree):
    assert _complete("bash", "xmask presets show graph-l", runs_tree).split() == ["graph-level"]
    assert _complete("bash", "xmask eval runs/a/", runs_tree).split() == ["runs/a/0", "runs/a/1"]
    assert "graph-level" in _complete("zsh", "xmask train --preset graph-l", runs_tree)
    assert _complete("fish", "xmask runs compare runs/b/0/", runs_tree).split() == ["runs/b/0/fold-2"]


@pytest.mark.parametrize("shell, needle", [("bash", "complete -o default -F _xmask_completion xmask"),
                                           ("zsh", "compdef _xmask_completion xmask"),
                                           ("fish", "complete --command xmask")])
def test_show_completion_prints_the_shells_script(shell, needle, monkeypatch):
    # Typer detects the shell from the process tree; this switch of typer's makes the option take its name.
    monkeypatch.setenv("_TYPER_COMPLETE_TEST_DISABLE_SHELL_DETECTION", "1")
    r = run("--show-completion", shell)
    assert r.exit_code == 0, r.output
    assert needle in r.stdout and "_XMASK_COMPLETE=complete_" + shell in r.stdout


@pytest.mark.slow
def test_bash_completes_through_the_script_it_is_shown(runs_tree, monkeypatch, tmp_path_factory):
    """The script `--show-completion bash` prints, sourced in a real bash, completes a run folder."""
    import shutil

    if shutil.which("bash") is None:
        pytest.skip("no bash on this machine")
    monkeypatch.setenv("_TYPER_COMPLETE_TEST_DISABLE_SHELL_DETECTION", "1")
    script = run("--show-completion", "bash").stdout
    bin_dir = tmp_path_factory.mktemp("bin")
    wrapper = bin_dir / "xmask"  # the command as installed: a script named xmask on PATH
    wrapper.write_text(f"#!{sys.executable}\nfrom xmask_cli.cli import main\nmain()\n")
    wrapper.chmod(0o755)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    env.pop("_TYPER_COMPLETE_TEST_DISABLE_SHELL_DETECTION", None)
    probe = script + '\nCOMP_WORDS=(xmask eval runs/a/); COMP_CWORD=2; _xmask_completion xmask\nprintf "%s\\n" "${COMPREPLY[@]}"\n'
    out = subprocess.run(["bash", "-c", probe], env=env, cwd=runs_tree, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["runs/a/0", "runs/a/1"]
