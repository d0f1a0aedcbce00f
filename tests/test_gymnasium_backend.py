"""env.backend=gymnasium (sim/backends/gymnasium.py): gymnasium envs from installed packages through the commands.

MountainCarContinuous-v0 (gymnasium's own: a flat Box observation, success = reaching the flag before the time limit)
with the scripted policy in tests/gym_experts.py, and robot_rl/Lift-v0 (sim.gym_adapter: a Dict observation and
info["success"]) for the observation mapping and the success key."""

from __future__ import annotations

import json

import numpy as np
import pytest

from robot_rl import sim
from robot_rl.sim.interface import Env
from tests.conftest import ROOT, TINY_BC, assert_one_line_error

CAR = ["env.backend=gymnasium", "env.gym.id=MountainCarContinuous-v0", "env.gym.success=terminated"]
EXPERT = "tests.gym_experts:mountain_car"


@pytest.mark.mujoco_compat
def test_a_gymnasium_env_is_an_env_of_the_interface():
    env = sim.make("lift", backend="gymnasium", num_envs=3,
                   gym={"id": "robot_rl/Lift-v0", "modules": ["robot_rl.sim.gym_adapter"],
                        "obs": {"arm": "proprio", "cube": "object"}})
    try:
        assert isinstance(env, Env)
        assert env.task_name == "robot_rl/Lift-v0" and env.obs_dims == {"arm": 20, "cube": 11}
        assert env.action_dim == 4 and env.action_space.kind == "gymnasium" and env.episode_steps == 80
        obs = env.reset(seed=5)
        assert obs["arm"].shape == (3, 20) and obs["arm"].dtype == np.float32
        lengths, success_any = [], False
        for _ in range(85):  # past the time limit: every env ends an episode and starts the next in the same step
            obs, reward, done, info = env.step(np.zeros((3, 4), np.float32))
            assert set(info["final_obs"]) == {"arm", "cube"} and info["success"].dtype == bool
            lengths += info["episode_length"][done].tolist()
            success_any |= info["success"].any()
        assert lengths == [80, 80, 80] and not success_any and (env.episode_ids[:, 1] == 1).all()
        first = env.end_episodes([1])
        assert first["arm"].shape == (1, 20)
    finally:
        env.close()


@pytest.mark.mujoco_compat
def test_collect_bc_residual_and_eval_on_a_gymnasium_env(cli_here, tmp_path):
    proc = cli_here("robot-rl-collect", *CAR, "backend=gymnasium", f"expert.path={EXPERT}", "expert.noise=0.2",
                    "episodes=6", "env.num_envs=3", f"hydra.run.dir={tmp_path / 'collect'}")
    assert proc.returncode == 0, proc.stderr
    assert "MountainCarContinuous-v0 / gymnasium: recorded 6 episodes" in proc.stdout, proc.stdout
    assert "success rate 1.000" in proc.stdout, proc.stdout
    store = tmp_path / "collect/episodes.zarr"

    proc = cli_here("robot-rl-eval", *CAR, "policy=expert", f"expert_path={EXPERT}", "episodes=3", "env.num_envs=3",
                    "videos=0", f"hydra.run.dir={tmp_path / 'eval_expert'}")
    assert proc.returncode == 0 and "success 1.000" in proc.stdout, proc.stdout + proc.stderr

    proc = cli_here("robot-rl-train-bc", *CAR, f"data={store}", "steps=4", *TINY_BC, f"hydra.run.dir={tmp_path / 'bc'}")
    assert proc.returncode == 0, proc.stderr
    spec = json.loads((tmp_path / "bc/policy/config.json").read_text())["spec"]
    assert spec["task"] == "MountainCarContinuous-v0" and spec["action_space"] == "gymnasium", spec

    # the reward models from the demos and the BC policy's rollouts (the env knows no progress: none compared)
    proc = cli_here("robot-rl-collect", *CAR, "backend=gymnasium", f"policy={tmp_path / 'bc/policy'}", "episodes=2",
                    "env.num_envs=2", f"hydra.run.dir={tmp_path / 'rollouts'}")
    assert proc.returncode == 0, proc.stderr
    proc = cli_here("robot-rl-train-reward", *CAR, f"data={store}", f"rollouts={tmp_path / 'rollouts/episodes.zarr'}",
                    "steps=5", "batch_size=64", f"hydra.run.dir={tmp_path / 'reward'}")
    assert proc.returncode == 0 and "no ground-truth progress" in proc.stdout, proc.stdout + proc.stderr

    # residual RL on the learned reward, the scripted human correcting with the same function
    proc = cli_here("robot-rl-train-residual", *CAR, f"base={tmp_path / 'bc/policy'}", f"demos={store}",
                    "rl.reward=learned", f"rl.reward_model={tmp_path / 'reward/reward_model'}",
                    "rl.interventions=scripted", f"rl.hil.expert_path={EXPERT}", "rl.guard.base_episodes=2",
                    "rl.guard.episodes=2", "env.num_envs=2", "eval_num_envs=2", "rl.env_steps=60",
                    "rl.learning_starts=20", "rl.eval_every=0", "rl.final_eval_episodes=2", "rl.videos=0",
                    "rl.time_budget_s=0", "rl.residual.hidden=[16]", "rl.learner.num_critics=2",
                    "rl.learner.critic_hidden=[16]", "rl.learner.batch_size=16", "rl.learner.critic_warmup=5",
                    f"hydra.run.dir={tmp_path / 'res'}")
    assert proc.returncode == 0, proc.stderr
    metrics = json.loads((tmp_path / "res/metrics.json").read_text())
    assert metrics["task"] == "MountainCarContinuous-v0" and metrics["env_steps"] >= 60, metrics
    assert metrics["control_hz"] == 30.0, metrics  # the env's render_fps, not env.control_hz: its robot minutes
    assert metrics["history"]["hil/fraction_so_far"][-1][1] > 0, metrics["history"]  # the human took over

    proc = cli_here("robot-rl-eval", *CAR, f"policy={tmp_path / 'res/policy'}", "episodes=2", "env.num_envs=2",
                    "videos=0", f"hydra.run.dir={tmp_path / 'eval_res'}")
    assert proc.returncode == 0 and "MountainCarContinuous-v0 / gymnasium: success" in proc.stdout, proc.stderr


@pytest.mark.parametrize("args, needles", [
    (["env.backend=gymnasium", "env.gym.id=NoSuchEnv-v9", "env.gym.modules=[json]"],
     ("env.gym.id='NoSuchEnv-v9'", "no such id", "imported first: json", "env.gym.modules")),
    (["env.backend=gymnasium"], ("needs env.gym.id",)),
    ([*CAR, "expert_path=tests.gym_experts"], ("expert path 'tests.gym_experts'", "module:name")),
    ([*CAR, "+env.gym.obs.arm=proprio"], ("env.gym.obs.arm='proprio'", "no such observation", "<the whole Box>")),
    (["env.backend=gymnasium", "env.gym.id=CartPole-v1", "env.gym.success=terminated"],
     ("CartPole-v1", "Discrete(2)", "only a Box action space")),
    (["env.backend=gymnasium", "env.gym.id=MountainCarContinuous-v0"],
     ("env.gym.success=is_success / success", "has no such key", "it sets: none", "env.gym.success=terminated")),
    (["env.backend=gymnasium", "env.gym.id=robot_rl/Lift-v0", "env.gym.modules=[sim.gym_adapter]",
      "env.gym.success=solved"], ("env.gym.success=solved", "it sets: ", "success")),
])
def test_bad_gymnasium_settings_are_one_line(cli_here, tmp_path, args, needles):
    proc = cli_here("robot-rl-eval", f"expert_path={EXPERT}", *args, "policy=expert", "episodes=1",
                    f"hydra.run.dir={tmp_path / 'run'}")
    assert_one_line_error(proc, *needles)
    assert not (tmp_path / "run/metrics.json").exists()


def test_the_robustness_card_says_a_gymnasium_env_has_no_factors_to_vary(cli_here, tmp_path):
    proc = cli_here("robot-rl-eval", *CAR, "sweep=robustness", "policy=expert", f"expert_path={EXPERT}",
                    f"hydra.run.dir={tmp_path / 'run'}")
    assert_one_line_error(proc, "sweep=robustness", "a gymnasium env has none of them to vary")
    assert not (tmp_path / "run/config.yaml").exists()


def test_a_policy_of_another_env_is_refused(cli_here, tiny, tmp_path):
    proc = cli_here("robot-rl-eval", *CAR, f"policy={tiny.policy}", "episodes=1", f"hydra.run.dir={tmp_path}")
    assert_one_line_error(proc, "task: policy 'lift', env 'MountainCarContinuous-v0'")


def test_the_quickstart_on_a_gymnasium_env(tmp_path, monkeypatch):
    """Every stage but the DDS dry run (one of our robots' deploy path), which is skipped with a line saying so."""
    from tests.test_cli import TINY_BC as QS_BC, TINY_RL as QS_RL, _quickstart

    monkeypatch.setenv("PYTHONPATH", str(ROOT))  # the console script imports tests.gym_experts

    proc = _quickstart(*CAR, "+env.gym.kwargs.max_episode_steps=150", f"expert_path={EXPERT}", "episodes=4",
                       "env.num_envs=2", "videos=0", *QS_BC, *QS_RL, tmp_path=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "deploy: skipped" in proc.stdout and "Spearman(progress, true progress) n/a" in proc.stdout, proc.stdout
    stages = json.loads((tmp_path / "metrics.json").read_text())["stages"]
    assert sorted(stages) == sorted(["expert", "demos", "bc", "eval_bc", "rollouts", "reward", "residual", "eval_residual"])
    assert stages["expert"]["success_rate"] == 1.0 and "human_fraction" in stages["residual"], stages
    assert (tmp_path / "report.html").is_file()


def test_the_time_limit_is_the_one_the_env_was_made_with():
    env = sim.make("x", backend="gymnasium", num_envs=1, gym={"id": "MountainCarContinuous-v0",
                                                             "kwargs": {"max_episode_steps": 150},
                                                             "success": "terminated"})
    try:
        assert env.episode_steps == 150 and env.control_hz == 30.0  # not the registered 999; the env's render_fps
    finally:
        env.close()


CAR_PLAN = ['+tasks.car.env_args=["env.backend=gymnasium","env.gym.id=MountainCarContinuous-v0",'
            '"env.gym.success=terminated","+env.gym.kwargs.max_episode_steps=150"]',
            f"+tasks.car.expert_path={EXPERT}", "+tasks.car.demos=4", "+tasks.car.bc_steps=3",
            '+tasks.car.bc_args=["policy.dims=[16,32]","policy.step_embed_dim=16","policy.pred_horizon=8",'
            '"policy.action_horizon=4","policy.inference_steps=2","batch_size=8"]', "only=[car]", "seeds=[0]"]


def test_the_benchmark_runs_a_gymnasium_env_as_a_task_of_its_own(tmp_path, monkeypatch):
    """tasks.<name>.env_args put every stage on the gymnasium env; its demos come from expert_path."""
    from robot_rl.benchmark import BenchmarkConfig, TaskPlan, task_stages

    plan = TaskPlan(env_args=["env.backend=gymnasium", "env.gym.id=X-v0", "+env.gym.kwargs.a=1"], expert_path="m:f")
    stages = {s.name: s.argv for s in task_stages(BenchmarkConfig(tasks={"car": plan}, seeds=[0]), "car")}
    assert set(stages) == {"demos", "bc", "residual", "rollouts", "reward", "learned", "scratch", "sac"}
    assert all("env.gym.id=X-v0" in argv for argv in stages.values()), stages
    assert "expert.path=m:f" in stages["demos"] and "+env.gym.kwargs.a=1" in stages["bc"]
    assert "env.gym.kwargs.a=1" in stages["sac"]  # SB3 SAC's key=value arguments: no Hydra '+'

    monkeypatch.setenv("PYTHONPATH", str(ROOT))  # the stages' console scripts import tests.gym_experts
    from tests.conftest import run_cli

    proc = run_cli("robot-rl-benchmark", *CAR_PLAN, "+tasks.car.baselines=[scratch]", "stages=[demos,bc]",
                   f"runs={tmp_path / 'runs'}", f"out={tmp_path / 'tasks'}")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "car seed 0 demos: done" in proc.stdout and "car seed 0 bc: done" in proc.stdout, proc.stdout
    demos = json.loads((tmp_path / "runs/car/seed0/demos/metrics.json").read_text())
    assert demos["task"] == "MountainCarContinuous-v0" and demos["success_rate"] == 1.0, demos


def test_the_sb3_sac_baseline_trains_on_a_gymnasium_env(tmp_path, capsys):
    pytest.importorskip("stable_baselines3")
    from robot_rl.rl.sb3_baseline import main

    main(["task=car", "env.backend=gymnasium", "env.gym.id=MountainCarContinuous-v0", "env.gym.success=terminated",
          "env.gym.kwargs.max_episode_steps=50", "env_steps=60", "learning_starts=20", "batch_size=16",
          "net_arch=[16]", "eval_every=30", "eval_episodes=2", "final_eval_episodes=2", "eval_num_envs=2",
          f"out={tmp_path / 'sac'}"])
    m = json.loads((tmp_path / "sac/metrics.json").read_text())
    assert m["task"] == "MountainCarContinuous-v0" and m["env_steps"] == 60 and m["mode"] == "sac", m
    assert m["control_hz"] == 30.0 and (m["eval"]["episodes"], m["eval"]["num_envs"]) == (2, 2)
    assert "MountainCarContinuous-v0 (SB3 SAC)" in capsys.readouterr().out


@pytest.mark.mujoco_compat
@pytest.mark.parametrize("package, gym, expert, episodes", [
    ("gymnasium_robotics", {"id": "FetchPickAndPlace-v4", "modules": ["gymnasium_robotics"]}, "fetch_pick_and_place",
     8),
    ("metaworld", {"id": "Meta-World/MT1", "modules": ["metaworld"],
                   "kwargs": {"env_name": "peg-insert-side-v3", "seed": 0}}, "metaworld_peg_insert_side", 8),
], ids=["fetch", "metaworld"])
def test_the_external_envs_of_the_study_run_with_their_scripted_experts(package, gym, expert, episodes):
    """docs/results/gymnasium_envs.md's envs, installed from PyPI beside MuJoCo 3.3.0 (Makefile MUJOCO_COMPAT: this
    test runs in that lane), through env.backend=gymnasium with bench/gym_experts.py's experts."""
    pytest.importorskip(package, reason="installed beside MuJoCo 3.3.0 for make test's mujoco_compat lane")
    from robot_rl.sim.experts import make_expert, run_episodes

    results = []
    for _ in range(2):  # a fixed seed (Meta-World: also its env.gym.kwargs.seed) gives the same episodes again
        env = sim.make("x", backend="gymnasium", num_envs=2, gym=gym)
        try:
            results.append(run_episodes(env, make_expert(env, path=f"bench.gym_experts:{expert}"), episodes, seed=0))
        finally:
            env.close()
    assert results[0]["mean_return"] == results[1]["mean_return"], results
    # Meta-World's own scripted policy misses some of MT1's goal positions (2 of the first 8 at seed 0)
    assert results[0]["success_rate"] >= 0.75, results
