"""Error types: each one's exit code as the documented table gives it, the table itself, one-line messages."""
from __future__ import annotations

import re

import pytest

from xmask_cli import errors
from xmask_cli.errors import EXIT_CODES, first_line

#: The table of the module's docstring (docs/safety.md, docs/cli.md), by hand.
DOCUMENTED = {
    "XMaskError": 1, "UsageError": 2, "ConfigError": 2, "DataNotFoundError": 3, "CacheError": 4,
    "NotWritableError": 5, "RunNotFoundError": 6, "DivergedError": 7, "PeerFailedError": 1,
}


def test_every_error_type_has_its_documented_exit_code():
    types = {name: t for name, t in vars(errors).items() if isinstance(t, type) and issubclass(t, errors.XMaskError)}
    assert set(types) == set(DOCUMENTED)
    for name, t in types.items():
        assert t.exit_code == DOCUMENTED[name], name
        assert t.exit_code in EXIT_CODES
    assert issubclass(errors.ConfigError, errors.UsageError)  # `except UsageError` catches a config error too


def test_the_docstring_table_lists_exactly_the_exit_codes():
    rows = re.findall(r"^(\d+)\s{2,}(\S.*)$", errors.__doc__ or "", flags=re.M)
    assert [int(code) for code, _ in rows] == sorted(EXIT_CODES) == [0, 1, 2, 3, 4, 5, 6, 7, 130]


@pytest.mark.parametrize("exc, want", [
    (errors.UsageError("bad key x\nhint: y"), "bad key x"),
    (errors.CacheError(""), "CacheError"),
    (ValueError("\nsecond"), "ValueError"),  # an empty first line: the type, not an empty report
    (KeyboardInterrupt(), "KeyboardInterrupt"),
    (RuntimeError("one"), "one"),
])
def test_first_line(exc, want):
    assert first_line(exc) == want
