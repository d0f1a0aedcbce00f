"""robot-rl-quickstart end to end, its config errors, and the Hydra config tree it composes."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

# The console script next to the interpreter running the tests (the venv's bin dir); sys.executable is
# not resolved so a symlinked venv python still points at the venv.
QUICKSTART = Path(sys.executable).parent / "robot-rl-quickstart"


def _quickstart(*overrides: str, tmp_path: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, JAX_PLATFORMS=os.environ.get("JAX_PLATFORMS", "cpu"))
    return subprocess.run(
        [str(QUICKSTART), *overrides, f"hydra.run.dir={tmp_path}"],
        capture_output=True, text=True, timeout=300, env=env,
    )


def _compose(*overrides: str):
    from hydra import compose, initialize_config_module

    with initialize_config_module(config_module="configs", version_base=None):
        return compose(config_name="quickstart", overrides=list(overrides))


def test_quickstart_writes_metrics_and_config(tmp_path):
    proc = _quickstart("episodes=4", "env.num_envs=4", tmp_path=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    assert metrics["episodes"] == 4
    assert 0.0 <= metrics["success_rate"] <= 1.0
    assert metrics["task"] == "lift" and metrics["backend"] == "mujoco"
    assert (tmp_path / "config.yaml").is_file()
    assert "success rate" in proc.stdout and str(tmp_path) in proc.stdout


def test_unknown_backend_exits_2_naming_valid_backends(tmp_path):
    proc = _quickstart("env.backend=nope", tmp_path=tmp_path)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 2, out
    assert "nope" in out and "mujoco" in out and "mjx" in out
    assert "Traceback" not in out


def test_reversed_randomization_range_exits_2_naming_min_gt_max(tmp_path):
    proc = _quickstart("env.randomization.friction=[2,1]", tmp_path=tmp_path)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 2, out
    assert "friction" in out and "min > max" in out
    assert "Traceback" not in out
    assert not (tmp_path / "metrics.json").exists()


def test_env_default_yaml_mirrors_env_config_fields():
    from sim.config import EnvConfig, RandomizationConfig

    cfg = _compose()
    assert set(cfg.env) == {f.name for f in dataclasses.fields(EnvConfig)}
    assert set(cfg.env.randomization) == {f.name for f in dataclasses.fields(RandomizationConfig)}
    # Defaults in YAML equal the dataclass defaults, so the two cannot drift apart silently.
    defaults = EnvConfig()
    for f in dataclasses.fields(EnvConfig):
        if f.name not in ("randomization", "task_config"):
            got = cfg.env[f.name]
            want = getattr(defaults, f.name)
            assert (list(got) if isinstance(want, tuple) else got) == (list(want) if isinstance(want, tuple) else want), f.name


def test_randomization_none_is_identity_and_sim2real_lands_in_env():
    from sim.config import from_mapping

    none = from_mapping(_compose().env).randomization
    assert tuple(none.friction) == (1.0, 1.0) and none.obs_noise_std == 0.0 and tuple(none.action_latency) == (0, 0)
    dr = from_mapping(_compose("randomization=sim2real").env).randomization
    assert tuple(dr.friction) == (0.7, 1.3) and tuple(dr.action_latency) == (0, 2) and dr.obs_noise_std == 0.005


@pytest.mark.parametrize("task", ["lift", "push", "peg_insert"])
def test_task_group_sets_env_task(task):
    assert _compose(f"task={task}").env.task == task
