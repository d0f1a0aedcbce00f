"""Run directory helpers: every command writes runs/<command>/<timestamp>-<name>/ with config.yaml + metrics.json."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from robot_rl.common.atomic import atomic_write_text


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
