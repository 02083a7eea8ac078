"""model.output=attention is a node-level output: other levels and the experts are refused with exit 2."""
from __future__ import annotations

import pytest

from tests.cli_helpers import one_error_line, run
from xmask_cli.config_resolve import resolve
from xmask_cli.engine.runs.experiment import check_config
from xmask_cli.errors import ConfigError


@pytest.mark.parametrize("preset", ["graph-level", "link-level"])
def test_attention_output_off_the_node_level_is_refused(preset: str) -> None:
    with pytest.raises(ConfigError, match="model.output=attention"):
        check_config(resolve(preset, ["model.output=attention"]))
    check_config(resolve("node-level", ["model.output=attention"]))  # the node level takes it


def test_cli_refuses_with_one_line_and_exit_2() -> None:
    r = run("train", "--preset", "graph-level", "--set", "model.output=attention")
    assert r.exit_code == 2 and "model.output=attention" in one_error_line(r)
    r = run("train", "--preset", "node-level", "--set", "model.output=attention", "--set", "model.experts=[local]")
    assert r.exit_code == 2 and "model.output is read by" in one_error_line(r)  # not by model.arch=experts
    assert "model.arch=experts" in one_error_line(r)
    r = run("train", "--preset", "node-level", "--set", "model.output_heads=2", "--set", "model.output_powers=[1,9]")
    assert r.exit_code == 2 and "model.output_powers" in one_error_line(r)


DIRECT = ["model.encoder=none", "model.residual=false", "model.norm=none", "node.sparse_features=false"]


@pytest.mark.parametrize("preset", ["graph-level", "link-level"])
def test_encoder_none_off_the_node_level_is_refused(preset: str) -> None:
    with pytest.raises(ConfigError, match="model.encoder=none"):
        check_config(resolve(preset, DIRECT))
    check_config(resolve("node-level", DIRECT))  # the node level takes it


@pytest.mark.parametrize("clash", ["model.residual=true", "model.norm=pre",
                                   "model.experts=[local]"])
def test_encoder_none_refuses_what_needs_an_input_as_wide_as_hidden(clash: str) -> None:
    r = run("train", "--preset", "node-level", "--set", "model.encoder=none",
            *[a for kv in DIRECT[1:] for a in ("--set", kv)], "--set", clash)
    line = one_error_line(r)
    assert r.exit_code == 2 and "model.encoder=none" in line and clash.split("=")[0] in line
