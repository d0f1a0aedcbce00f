"""robot-rl-quickstart end to end, its config errors, and the Hydra config tree it composes."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
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


def _chromium(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    """Debian's headless Chromium (installed by `make`), without network chatter, on a fresh profile."""
    exe = shutil.which("chromium")
    assert exe, "chromium is missing: `make install` installs Debian's chromium package (apt, as root)"
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             f"--user-data-dir={tmp_path / 'chromium-profile'}"]
    return subprocess.run([exe, *flags, *args], capture_output=True, text=True, timeout=120)


def _compose(*overrides: str):
    from hydra import compose, initialize_config_module

    with initialize_config_module(config_module="robot_rl.configs", version_base=None):
        return compose(config_name="quickstart", overrides=list(overrides))


TINY_BC = ["demos=6", "bc.steps=3", "bc.batch_size=16", "policy.dims=[16,32]", "policy.step_embed_dim=16",
           "policy.pred_horizon=8", "policy.action_horizon=4", "policy.inference_steps=3"]
TINY_RL = ["rollouts=4", "reward.steps=5", "reward.batch_size=64", "deploy_episodes=1",
           "rl.time_budget_s=0", "rl.env_steps=40", "rl.learning_starts=20", "rl.residual.hidden=[16]",
           "rl.learner.num_critics=2", "rl.learner.critic_hidden=[16]", "rl.learner.batch_size=16",
           "rl.learner.critic_warmup=5", "rl.guard.base_episodes=2", "rl.guard.episodes=2"]
# Lift episodes of 48 steps instead of 80: the expert finishes in ~36; the tiny BC policy fails, so its evaluations,
# rollouts and the real-time dry run last the whole episode
SHORT = ["+env.task_config.episode_steps=48"]


def test_quickstart_runs_every_stage_and_reuses_finished_ones(tmp_path):
    proc = _quickstart("episodes=4", "env.num_envs=2", "videos=1", *TINY_BC, *TINY_RL, *SHORT, tmp_path=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    stages = json.loads((tmp_path / "metrics.json").read_text())["stages"]
    assert set(stages) == {"expert", "demos", "bc", "eval_bc", "rollouts", "reward", "residual", "eval_residual",
                           "deploy"}
    assert stages["expert"]["episodes"] == 4 and stages["expert"]["success_rate"] == 1.0
    assert stages["demos"]["episodes"] == 6 and stages["bc"]["steps"] == 3
    assert 0.0 <= stages["eval_bc"]["success_rate"] <= 1.0 and len(stages["eval_bc"]["videos"]) == 1
    assert stages["rollouts"]["episodes"] == 4 and 0.0 <= stages["reward"]["classifier_auroc"] <= 1.0
    assert stages["residual"]["env_steps"] == 40 and stages["residual"]["updates"] > 0
    assert stages["residual"]["reward"] == "learned" and 0.0 <= stages["residual"]["human_fraction"] <= 0.15
    # the learned reward's cost and guard: the base's and the last policy's checks (2 episodes each), labels
    r = stages["residual"]
    assert r["checked_episodes"] == 4 and r["operator_labels"] == r["checked_episodes"] + r["labelled_training_episodes"]
    assert r["policy_from_env_step"] in (0, 40) and r["robot_minutes"] > 0
    assert stages["deploy"]["episodes"] == 1 and stages["deploy"]["missed_ticks"] is not None
    assert stages["eval_residual"]["episodes"] == 4 and stages["eval_residual"]["seed"] == stages["eval_bc"]["seed"]
    for path in ("config.yaml", "demos/episodes.zarr", "bc/policy/model.safetensors", "bc/curves.png",
                 "eval_bc/videos/episode_0.mp4", "residual/policy/config.json", "residual/curves.png",
                 "eval_residual/videos/episode_0.mp4", "reward/reward_model", "deploy/node/metrics.json"):
        assert (tmp_path / path).exists(), path
    for line in ("scripted expert success rate", "diffusion BC success rate", "BC + residual RL success rate",
                 "residual RL: 40 env steps", "reward models: Spearman", "deployment dry run over DDS: ",
                 "  operator labels "):
        assert line in proc.stdout, line
    assert str(tmp_path) in proc.stdout
    report = tmp_path / "report.html"
    assert f"report: {report}" in proc.stdout and (tmp_path / "report.md").is_file()
    assert "| BC + residual RL |" in (tmp_path / "report.md").read_text()
    dom = _chromium(tmp_path, "--dump-dom", report.as_uri())
    assert dom.returncode == 0, dom.stderr
    for text in ("Success rates", "diffusion BC", "BC + residual RL", "Learning curves", "Final policy",
                 "Reward models", "Residual RL and interventions", "operator_labels", "Deployment dry run"):
        assert text in dom.stdout, text
    shot = tmp_path / "report.png"
    _chromium(tmp_path, f"--screenshot={shot}", "--window-size=1000,1600", "--hide-scrollbars", report.as_uri())
    from PIL import Image

    pixels = np.asarray(Image.open(shot).convert("RGB"))
    assert pixels.shape[:2] == (1600, 1000)
    assert (pixels < 200).any(-1).mean() > 0.02, "the page rendered nearly blank"
    policy_mtime = (tmp_path / "bc/policy/model.safetensors").stat().st_mtime_ns
    assert r["resumed_from"] is None
    # the residual stage as a kill after its last checkpoint leaves it (no done.json): the rerun resumes it
    (tmp_path / "residual" / "done.json").unlink()
    again = _quickstart("episodes=4", "env.num_envs=2", "videos=1", *TINY_BC, *TINY_RL, *SHORT, tmp_path=tmp_path)
    assert again.returncode == 0, again.stdout + again.stderr
    assert again.stdout.count("(reused)") == 3  # the stages with a success rate: expert, BC, BC + residual
    assert (tmp_path / "bc/policy/model.safetensors").stat().st_mtime_ns == policy_mtime
    r = json.loads((tmp_path / "metrics.json").read_text())["stages"]["residual"]
    assert r["resumed_from"] == 40 and r["env_steps"] == 40 and not r["reused"]


def test_quickstart_without_successful_demos_stops_at_the_demos_stage_before_training(tmp_path, capsys, monkeypatch):
    from tests.conftest import run_main

    code, _, err = run_main("robot-rl-quickstart", [
        "stages=[expert,demos,bc]", "episodes=2", "env.num_envs=2", "env.randomization.action_latency=[100,100]",
        *TINY_BC, f"hydra.run.dir={tmp_path}"], capsys, monkeypatch)
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and "Traceback" not in err, err
    for needle in ("demos: the scripted expert succeeded in 0 of 6 episodes", "demo_noise=0.1",
                   "without action noise: success rate 0.00 over 2 episodes",
                   "env.randomization.action_latency=[100, 100]", "lower demo_noise"):
        assert needle in lines[0], (needle, lines[0])
    assert (tmp_path / "expert" / "done.json").is_file() and not (tmp_path / "demos" / "done.json").exists()
    assert not (tmp_path / "bc").exists()  # no training started


def test_a_killed_quickstart_resumes_its_bc_stage_from_the_last_checkpoint(tmp_path, capsys, monkeypatch):
    """A real SIGKILL part-way through BC; the rerun reuses the finished stages and continues BC from its last
    checkpoint (peg_insert's recipe trains 8,000 BC steps: a killed run must not start them over)."""
    import signal

    from tests.conftest import checkpoint_step, run_main, running, wait_for

    tiny = [a for a in TINY_BC if not a.startswith("bc.steps=")]
    args = ["stages=[expert,demos,bc]", "episodes=2", "env.num_envs=2", *tiny, "bc.ckpt_every=3", "bc.log_every=1",
            *SHORT, f"hydra.run.dir={tmp_path}"]
    with running("robot-rl-quickstart", *args, "bc.steps=100000") as proc:
        wait_for(lambda: (checkpoint_step(tmp_path / "bc") or 0) >= 6 or proc.poll() is not None,
                 "the BC stage's second checkpoint", timeout=240)
        assert proc.poll() is None, proc.stderr.read()
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    at = checkpoint_step(tmp_path / "bc")
    assert at >= 6 and not (tmp_path / "bc" / "done.json").exists()
    code, out, err = run_main("robot-rl-quickstart", [*args, f"bc.steps={at + 2}"], capsys, monkeypatch)
    assert code == 0, out + err
    stages = json.loads((tmp_path / "metrics.json").read_text())["stages"]
    assert stages["expert"]["reused"] and stages["demos"]["reused"] and not stages["bc"]["reused"]
    assert stages["bc"]["resumed_from"] == at and stages["bc"]["steps"] == at + 2
    history = json.loads((tmp_path / "bc" / "metrics.json").read_text())["history"]
    assert [s for s, _ in history["train/loss"]] == list(range(1, at + 3))  # the killed run's steps kept, none twice


def test_quickstart_stage_prefix_evaluates_only_the_expert(tmp_path):
    proc = _quickstart("stages=[expert]", "episodes=4", "env.num_envs=4", tmp_path=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert list(json.loads((tmp_path / "metrics.json").read_text())["stages"]) == ["expert"]


def test_env_default_yaml_mirrors_env_config_fields():
    from robot_rl.sim.config import EnvConfig, RandomizationConfig

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
    from robot_rl.sim.config import from_mapping

    none = from_mapping(_compose().env).randomization
    assert tuple(none.friction) == (1.0, 1.0) and none.obs_noise_std == 0.0 and tuple(none.action_latency) == (0, 0)
    dr = from_mapping(_compose("randomization=sim2real").env).randomization
    assert tuple(dr.friction) == (0.7, 1.3) and tuple(dr.action_latency) == (0, 2) and dr.obs_noise_std == 0.005


@pytest.mark.parametrize("task", ["lift", "push", "peg_insert"])
def test_task_group_sets_env_task(task):
    assert _compose(f"task={task}").env.task == task
