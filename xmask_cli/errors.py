"""Error types, each with its exit code and an actionable one-line message.

Exit codes (documented in docs/safety.md, in docs/cli.md and in ``xmask --help``):

====  ==========================================================
0     success
1     runtime failure (a bug or an unexpected library error)
2     bad input or usage: unknown dataset, preset, key or type
3     data not found: raw dataset files missing and not downloadable
4     cache invalid: corrupt, truncated, or of an older format
5     cannot write: cache or output directory not writable
6     run not found or damaged: no run directory (config.json, best.pt) where given,
      or a run file that does not load
7     training diverged: a non-finite loss (best checkpoint kept)
130   interrupted (Ctrl-C)
====  ==========================================================
"""
from __future__ import annotations

from collections.abc import Iterable


class XMaskError(Exception):
    """Base class: ``str(err)`` is the one line shown to the user."""

    exit_code = 1


class UsageError(XMaskError):
    """Bad input: unknown names, malformed values, impossible combinations."""

    exit_code = 2


class ConfigError(UsageError, ValueError):
    """A config does not fit the schema or its rules: a preset, a ``--set`` override, or a run view
    (``ModelConfig``) built in Python. Also a ``ValueError`` (a value out of its domain), so code that
    catches ``ValueError`` from a model config goes on catching it.

    Attributes:
        keys: the dotted keys the refusing check reads (``model.hidden`` and ``model.heads`` for a width
            that is not a multiple of the heads; a rule's declared keys): what ``xmask tune`` asks to know
            whether a refusal involves another searched key. Empty where no check declared them.
    """

    def __init__(self, message: str, *, keys: Iterable[str] = ()) -> None:
        super().__init__(message)
        self.keys: frozenset[str] = frozenset(keys)


class DataNotFoundError(XMaskError):
    """Raw dataset files are missing and could not be fetched."""

    exit_code = 3


class CacheError(XMaskError):
    """A cache file is unreadable, corrupt, or of another format version."""

    exit_code = 4


class NotWritableError(XMaskError):
    """A directory we must write to is not writable."""

    exit_code = 5


class RunNotFoundError(XMaskError):
    """A run directory is missing, lacks the files ``eval`` / ``explain`` read, or one is damaged."""

    exit_code = 6


class DivergedError(XMaskError):
    """Training met a non-finite loss (or gradient); the best checkpoint so far is kept."""

    exit_code = 7


EXIT_CODES: dict[int, str] = {
    0: "success",
    1: "runtime failure",
    2: "bad input or usage (unknown dataset, preset, key or type)",
    3: "dataset files not found",
    4: "cache invalid (corrupt, truncated, or older format)",
    5: "directory not writable",
    6: "run directory not found, incomplete or damaged",
    7: "training diverged (non-finite loss; best checkpoint kept)",
    130: "interrupted",
}


def first_line(exc: BaseException) -> str:
    """The first line of an exception's message (its class name if empty): for one-line error reports."""
    text = str(exc).splitlines()[0] if str(exc) else ""
    return text or type(exc).__name__


class PeerFailedError(XMaskError):
    """A collective failed: another rank died, was killed or stopped answering (exit code 1)."""

    exit_code = 1
