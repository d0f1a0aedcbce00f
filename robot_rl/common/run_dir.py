"""Run directory helpers: every command writes runs/<command>/<timestamp>-<name>/ with config.yaml + metrics.json.

Nothing is written before the command's checks have passed: Hydra itself writes no .hydra/ record and no log file
there (configs/command.yaml, which every command's YAML lists: output_subdir null, job_logging stdout);
`write_config` writes both records. A training holds the run directory (`hold`) while it resumes and runs, so a
second one on it stops with one line.
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path
from typing import Any, Iterator

from robot_rl.common.atomic import atomic_write_text

LOCK = ".lock"  # holds the pid of the process using the run directory (flock'ed while it runs)


class RunDirBusy(RuntimeError):
    """Another live process holds the run directory; the message names its pid."""


def current_run_dir() -> Path:
    """The output directory of the running Hydra app (hydra.run.dir, resolved), created if missing."""
    from hydra.core.hydra_config import HydraConfig

    path = Path(HydraConfig.get().runtime.output_dir)
    path.mkdir(parents=True, exist_ok=True)
    return path


def write_config(run_dir: Path, cfg: Any) -> Path:
    """Write the run's config record: run_dir/config.yaml (fully resolved) and, under a Hydra app, the record Hydra
    would have written at start-up, .hydra/{config,hydra,overrides}.yaml (interpolations kept, the command line)."""
    from omegaconf import OmegaConf

    run_dir = Path(run_dir)
    path = atomic_write_text(run_dir / "config.yaml", OmegaConf.to_yaml(cfg, resolve=True))
    from hydra.core.hydra_config import HydraConfig

    if HydraConfig.initialized():
        hydra_cfg = HydraConfig.instance().cfg  # {"hydra": ...}
        record = run_dir / ".hydra"
        atomic_write_text(record / "config.yaml", OmegaConf.to_yaml(cfg))
        atomic_write_text(record / "hydra.yaml", OmegaConf.to_yaml(hydra_cfg))
        atomic_write_text(record / "overrides.yaml", OmegaConf.to_yaml(hydra_cfg.hydra.overrides.task))
    return path


def write_metrics(run_dir: Path, metrics: dict) -> Path:
    """Write run_dir/metrics.json atomically, so a reader never sees a half-written file."""
    return atomic_write_text(Path(run_dir) / "metrics.json", json.dumps(metrics, indent=2, sort_keys=True) + "\n")


@contextlib.contextmanager
def hold(run_dir: str | Path) -> Iterator[Path]:
    """Hold run_dir for the block: an exclusive flock on run_dir/.lock, which holds our pid. RunDirBusy naming the
    holder's pid when another process holds it. The kernel drops the lock when its process dies, so the lock of a
    SIGKILLed training is simply taken over; the file stays (deleting a lock file races with the next taker)."""
    import fcntl

    path = Path(run_dir) / LOCK
    path.parent.mkdir(parents=True, exist_ok=True)
    f = open(path, "a+")
    try:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            f.seek(0)
            pid = f.read().strip() or "unknown"
            raise RunDirBusy(f"run directory {Path(run_dir)} is in use by another process (pid {pid}); wait for it "
                             "to finish, stop it, or pass another hydra.run.dir") from None
        f.seek(0)
        f.truncate()
        f.write(f"{os.getpid()}\n")
        f.flush()
        yield Path(run_dir)
    finally:
        f.close()  # closing the last descriptor releases the flock
