"""Run directory helpers: every command writes runs/<command>/<timestamp>-<name>/ with config.yaml + metrics.json."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any


def current_run_dir() -> Path:
    """The output directory of the running Hydra app (hydra.run.dir, resolved), created if missing."""
    from hydra.core.hydra_config import HydraConfig

    path = Path(HydraConfig.get().runtime.output_dir)
    path.mkdir(parents=True, exist_ok=True)
    return path


def write_config(run_dir: Path, cfg: Any) -> Path:
    """Write the fully resolved config as run_dir/config.yaml (Hydra's .hydra/config.yaml keeps interpolations)."""
    from omegaconf import OmegaConf

    return atomic_write_text(Path(run_dir) / "config.yaml", OmegaConf.to_yaml(cfg, resolve=True))


def write_metrics(run_dir: Path, metrics: dict) -> Path:
    """Write run_dir/metrics.json atomically, so a reader never sees a half-written file."""
    return atomic_write_text(Path(run_dir) / "metrics.json", json.dumps(metrics, indent=2, sort_keys=True) + "\n")


def atomic_write_text(path: Path, text: str) -> Path:
    """Write text to a temp file in the same directory, fsync, then os.replace onto `path`."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    return path
