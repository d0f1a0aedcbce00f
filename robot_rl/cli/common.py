"""What every robot-rl-<verb> command shares: config errors as one line + exit 2, env building, progress bars.

A command calls `fail("...")` for a bad value (one message on stderr naming the value and the fix, exit
code 2, no traceback), validates the env config with `env_config(cfg.env)` before anything is built, and
builds the env with `make_env`, which also turns on JAX's persistent compilation cache for MJX.
"""

from __future__ import annotations

import logging
import os
import sys
from typing import NoReturn


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


def env_config(cfg_env):
    """Validated sim.config.EnvConfig from the `env` node, before any model is compiled."""
    from sim.config import from_mapping
    from sim.tasks import TASKS

    try:
        env_cfg = from_mapping(cfg_env)
        env_cfg.validate(TASKS)
    except (ValueError, TypeError) as e:  # ConfigError, or a value of the wrong type (num_envs=abc)
        fail(str(e))
    return env_cfg


def make_env(env_cfg):
    """The batched env; MJX gets JAX's persistent compilation cache, task_config errors exit 2."""
    if env_cfg.backend == "mjx":
        from robot_rl.jax_cache import enable_compilation_cache

        # Hydra logs at INFO; JAX's backend probing (no TPU, ...) is noise for our commands.
        logging.getLogger("jax").setLevel(logging.WARNING)
        enable_compilation_cache()
    import sim
    from sim.config import ConfigError

    try:
        return sim.make_from_config(env_cfg)
    except ConfigError as e:  # task_config is checked against the task's own config class here
        fail(str(e))


def set_torch_threads(n: int) -> None:
    """Intra-op threads for torch (0 = torch's default). Small models on few cores run fastest on 1."""
    if n > 0:
        import torch

        torch.set_num_threads(n)


def load_checkpoint(path: str, env, device: str = "cpu"):
    """A BasePolicy checkpoint checked against `env`, or fail() naming the file or the mismatch."""
    from policies import SpecMismatch, load_policy
    from robot_rl.checkpoint import CheckpointError

    try:
        policy = load_policy(path, device=str(device))
        policy.spec.check_env(env)
    except (CheckpointError, SpecMismatch) as e:
        fail(str(e))
    except RuntimeError as e:  # e.g. an unavailable torch device
        fail(f"cannot load {path} on device {device!r}: {str(e).splitlines()[0]}")
    return policy


def resume_or_fail(workspace) -> bool:
    """workspace.try_resume(), with a changed config or a broken checkpoint as one line + exit 2."""
    from robot_rl.checkpoint import CheckpointError, ResumeMismatch

    try:
        return workspace.try_resume()
    except (ResumeMismatch, CheckpointError) as e:
        fail(str(e))
