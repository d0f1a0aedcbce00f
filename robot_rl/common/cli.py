"""Errors of a console script: one line on stderr naming the value and the fix, exit code 2, no traceback.

A command calls `fail("...")` for a bad value and `warn("...")` for something the run can go on with;
`or_fail(fn, ...)` turns a library error (ConfigError, ...) into the same one line. Long work shows
`progress_bar()` (count, elapsed, ETA).
"""

from __future__ import annotations

import argparse
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


class ArgumentParser(argparse.ArgumentParser):
    """argparse for a console script whose usage errors are one line + exit 2 like every other bad input (argparse's
    own prints the usage block first)."""

    def error(self, message: str) -> NoReturn:
        fail(f"{message} ({self.prog} -h shows the usage)")


def hydra_command(config_name: str) -> Callable[[Callable], Callable[[], None]]:
    """@hydra.main(config_name=...) over the pkg://robot_rl.configs tree, with every bad command line as one line + exit 2:
    Hydra's own errors (an unknown group option such as task=nope, a key not in the config, an override that does
    not parse), a mandatory value left unset (policy=???), and a top-level key added with `+key=value` (Hydra
    accepts it; no command reads it). Errors raised inside the command are reported as before."""
    import functools

    def decorate(task: Callable) -> Callable[[], None]:
        import hydra

        saved: dict = {}

        def restore_full_error() -> None:
            if "old" in saved:
                old = saved.pop("old")
                if old is None:
                    os.environ.pop("HYDRA_FULL_ERROR", None)
                else:
                    os.environ["HYDRA_FULL_ERROR"] = old

        def run(cfg):
            saved["started"] = True
            restore_full_error()  # an error inside the command: Hydra's usual report, as before
            _reject_added_keys(cfg)
            from omegaconf.errors import MissingMandatoryValue

            try:
                return task(cfg)
            except MissingMandatoryValue as e:
                key = getattr(e, "full_key", None) or "a key"
                fail(f"{key}=??? has no value; give one on the command line ({key}=...)")

        hydra_main = hydra.main(version_base=None, config_path="pkg://robot_rl.configs", config_name=config_name)(run)
        doc = sys.modules[task.__module__].__doc__  # what --help says the command does (robot_rl.common.cli_help)

        @functools.wraps(task)
        def main(cfg=None):
            if cfg is not None:  # called with a composed config
                return task(cfg)
            from robot_rl.common import cli_help

            cli_help.register(doc)
            from hydra.errors import HydraException
            from omegaconf.errors import OmegaConfBaseException

            if os.environ.get("HYDRA_FULL_ERROR") == "1":  # the user asked for Hydra's full tracebacks
                return hydra_main()
            saved.update(started=False, old=os.environ.get("HYDRA_FULL_ERROR"))
            os.environ["HYDRA_FULL_ERROR"] = "1"  # Hydra raises its composition errors instead of printing them
            try:
                if cli_help.wants_help(sys.argv[1:]):
                    print(cli_help.help_page(config_name, doc, [a for a in sys.argv[1:] if not a.startswith("-")]),
                          end="")
                    sys.exit(0)
                return hydra_main()
            except (HydraException, OmegaConfBaseException) as e:
                if saved["started"]:
                    raise
                fail(hydra_error_line(e))
            finally:
                restore_full_error()

        return main

    return decorate


def hydra_error_line(e: BaseException) -> str:
    """One line of a Hydra / OmegaConf composition error: what was wrong and, where Hydra lists them, the options."""
    from hydra.errors import MissingConfigException, OverrideParseException
    from omegaconf.errors import ConfigAttributeError, ConfigKeyError

    cause = e.__cause__
    if isinstance(cause, (ConfigKeyError, ConfigAttributeError)) and "not in struct" in str(cause):
        key = getattr(cause, "full_key", None) or "?"
        return (f"unknown key '{key}': {command_name()} has no such setting (check the spelling; "
                f"`{command_name()} --cfg job` prints every key)")
    if isinstance(e, MissingConfigException) and e.options is not None and e.missing_cfg_file:
        group, _, name = e.missing_cfg_file.rpartition("/")
        return f"{group}={name}: no such option; valid: {', '.join(sorted(e.options))}"
    if isinstance(e, OverrideParseException):
        return f"cannot parse the override {e.override!r}: {e.message.splitlines()[0]}"
    lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
    lines = lines[: next((i for i, ln in enumerate(lines) if ln.startswith("Config search path")), len(lines))]
    if cause is not None and str(cause).strip():
        lines.append(str(cause).strip().splitlines()[0])
    return "; ".join(lines) or type(e).__name__


def _reject_added_keys(cfg) -> None:
    """A `+key=value` at the top level adds a key no command reads (usually a typo of a real key): refuse it.
    `+group=option` (a config group) and keys added inside nested nodes (+env.task_config.x=...) stay allowed:
    nested nodes are checked by their config dataclasses."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.core.override_parser.overrides_parser import OverridesParser

    hc = HydraConfig.get()
    groups = set(hc.runtime.choices)
    for o in OverridesParser.create().parse_overrides(list(hc.overrides.task)):
        key = o.key_or_group
        if o.is_add() and "." not in key and "/" not in key and key not in groups:
            valid = sorted(k for k in cfg if k != key)
            fail(f"unknown key '{key}' ({o.input_line} adds a setting {command_name()} does not read); "
                 f"valid keys: {', '.join(valid)}")
