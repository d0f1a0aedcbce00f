"""Errors of a console script: one line on stderr naming the value and the fix, exit code 2, no traceback.

A command calls `fail("...")` for a bad value and `warn("...")` for something the run can go on with;
`or_fail(fn, ...)` turns a library error (ConfigError, ...) into the same one line. Long work shows
`progress_bar()` (count, elapsed, ETA).
"""

from __future__ import annotations

import os
import sys
from typing import Callable, NoReturn, TypeVar

T = TypeVar("T")


def command_name() -> str:
    return os.path.basename(sys.argv[0]) or "robot-rl"


def fail(msg: str) -> NoReturn:
    """A wrong config value or path: one clear message on stderr, exit code 2, no traceback."""
    print(f"{command_name()}: error: {msg}", file=sys.stderr)
    sys.exit(2)


def warn(msg: str) -> None:
    """Something the run can go on with but the user should know: one line on stderr."""
    print(f"{command_name()}: warning: {msg}", file=sys.stderr)


def progress_bar():
    """A rich progress bar with count, elapsed time and ETA."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

    return Progress(
        TextColumn("[progress.description]{task.description}"), BarColumn(), MofNCompleteColumn(),
        TextColumn("elapsed"), TimeElapsedColumn(), TextColumn("eta"), TimeRemainingColumn(), transient=False,
    )


def whole(name: str, value, minimum: int = 0) -> int:
    """`value` as an int >= minimum, or fail naming `name`."""
    if not (isinstance(value, int) and not isinstance(value, bool) and value >= minimum):
        fail(f"{name}={value!r} must be a whole number >= {minimum}")
    return int(value)


def number(name: str, value, minimum: float = 0.0, strict: bool = False) -> float:
    """`value` as a float >= minimum (> when strict), or fail naming `name`."""
    ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    if not ok or (value <= minimum if strict else value < minimum):
        fail(f"{name}={value!r} must be a number {'>' if strict else '>='} {minimum}")
    return float(value)


def or_fail(fn: Callable[..., T], *args, errors: tuple[type[BaseException], ...] = (ValueError, TypeError),
            **kwargs) -> T:
    """fn(*args, **kwargs), with an exception of `errors` (a bad value the library named) as fail(message)."""
    try:
        return fn(*args, **kwargs)
    except errors as e:
        fail(str(e))
