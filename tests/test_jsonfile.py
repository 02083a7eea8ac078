"""xmask_cli.jsonfile: the one bounded reader of the JSON xmask reads back."""
from __future__ import annotations

import json
import os
import threading

import pytest

from xmask_cli.errors import CacheError, RunNotFoundError
from xmask_cli.jsonfile import (
    MAX_DEPTH,
    Damaged,
    Number,
    OptionalInt,
    _depth,
    parse_checked,
    parse_json,
    read_json,
    read_json_lines,
)


def _nested(depth: int) -> object:
    value: object = 1
    for i in range(depth):
        value = [value] if i % 2 else {"k": value}
    return value


@pytest.mark.parametrize("depth", [0, 1, 2, 7, MAX_DEPTH, MAX_DEPTH + 1])
def test_depth_is_the_nesting_json_itself_builds(depth):
    text = json.dumps({"s": "[[{{ not structure ]]\"[", "v": _nested(depth)})  # brackets in strings do not count
    assert _depth(text.encode()) == depth + 1  # the outer object
    if depth + 1 <= MAX_DEPTH:
        assert parse_json(text) == json.loads(text)
    else:
        with pytest.raises(Damaged, match=f"nested more than {MAX_DEPTH} levels deep"):
            parse_json(text)


def test_a_hundred_thousand_nested_brackets_are_damaged_not_a_recursion_error():
    with pytest.raises(Damaged, match="nested more than"):
        parse_json("[" * 100_000 + "]" * 100_000, list)
    with pytest.raises(Damaged, match="nested more than"):
        parse_json("[" * 100_000)  # unbalanced too


@pytest.mark.parametrize("text, expect, needle", [
    ("[1, 2, 3]", dict, "not a JSON object but an array"),
    ('"x"', dict, "not a JSON object but a string"),
    ("{}", list, "not a JSON array but an object"),
    ("{", dict, "not JSON"),
    (b"\xff\xfe", dict, "not JSON"),
])
def test_top_level_type_and_syntax(text, expect, needle):
    with pytest.raises(Damaged, match=needle):
        parse_json(text, expect)


def test_size_bound():
    with pytest.raises(Damaged, match="more than the 10 a JSON file"):
        parse_json('{"a": "0123456789"}', max_bytes=10)


def test_fields_are_checked_with_their_types():
    fields = {"metrics": dict[str, Number], "epoch": int, "idx": list[int]}
    good = {"metrics": {"val": 0.5, "test": 1}, "epoch": 3, "idx": [1, 2], "fold": None}
    parse_checked(json.dumps(good), "x", fields=fields, optional={"fold": OptionalInt})
    for bad, needle in ((dict(good, metrics={"val": "0.5"}), "'metrics' is an object"),
                        (dict(good, epoch=True), "'epoch' is a boolean"),  # JSON true is no epoch
                        (dict(good, epoch=2.5), "'epoch' is a number"),
                        (dict(good, idx=[1, "2"]), "'idx' is an array"),
                        (dict(good, fold="0"), "'fold' is a string"),
                        ({k: v for k, v in good.items() if k != "epoch"}, "no 'epoch' field")):
        with pytest.raises(RunNotFoundError, match=needle) as info:
            parse_checked(json.dumps(bad), "summary of x", fields=fields, optional={"fold": OptionalInt})
        assert str(info.value).startswith("summary of x is damaged (")


def test_read_json_names_the_file_and_uses_the_callers_error(tmp_path):
    path = tmp_path / "summary.json"
    path.write_text("[" * 100_000)
    with pytest.raises(RunNotFoundError, match=f"^{path} is damaged \\(nested more than 64 levels deep\\); restore"):
        read_json(path)
    with pytest.raises(CacheError, match=f"^{path} is damaged"):
        read_json(path, error=CacheError, hint="rebuild it")
    with pytest.raises(FileNotFoundError):
        read_json(tmp_path / "missing.json")
    (tmp_path / "link.json").symlink_to(path)
    with pytest.raises(RunNotFoundError, match="a symbolic link"):
        read_json(tmp_path / "link.json")
    with pytest.raises(RunNotFoundError, match="not a regular file"):
        read_json(tmp_path)


def test_a_fifo_is_refused_without_blocking(tmp_path):
    fifo = tmp_path / "summary.json"
    os.mkfifo(fifo)
    outcome: list[BaseException] = []
    t = threading.Thread(target=lambda: outcome.append(pytest.raises(RunNotFoundError, read_json, fifo).value),
                         daemon=True)
    t.start()
    t.join(20)
    assert not t.is_alive(), "reading a FIFO blocked"
    assert "not a regular file" in str(outcome[0])


def test_json_lines_name_the_damaged_line(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text('{"epoch": 0}\n\n{"epoch": 1}\n' + "[" * 1000 + "\n")
    with pytest.raises(RunNotFoundError, match=f"^{path} line 4 is damaged \\(nested"):
        read_json_lines(path, fields={"epoch": int})
    path.write_text('{"epoch": 0}\n\n{"epoch": 1}\n')
    assert read_json_lines(path, fields={"epoch": int}) == [{"epoch": 0}, {"epoch": 1}]
    path.write_text('{"epoch": 0}\n[1]\n')
    with pytest.raises(RunNotFoundError, match="line 2 is damaged \\(not a JSON object but an array"):
        read_json_lines(path)


def test_non_text_is_damaged():
    with pytest.raises(CacheError, match="cache c \\(attribute params\\) is damaged \\(not JSON text but int"):
        parse_checked(3, "cache c (attribute params)", error=CacheError)
