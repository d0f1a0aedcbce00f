"""Residual RL training: bad inputs stop before training, checkpoints resume, NaN stops with the last good
checkpoint kept, and a short run fixes a deliberately biased base on lift."""

from __future__ import annotations

from robot_rl.common.config import from_mapping
import json

import numpy as np
import pytest

import sim
from policies import SpecMismatch, load_policy
from policies.expert import ExpertPolicy
from robot_rl.evaluation import evaluate_policy
from robot_rl.rl.learner import LearnerConfig
from policies.residual import ResidualConfig
from robot_rl.rl.train import ResidualRLConfig, ResidualWorkspace, from_scratch, train
from robot_rl.train_bc import ResumeMismatch


@pytest.fixture(scope="module")
def small_env():
    env = sim.make("lift", num_envs=4, threads=1, task_config={"episode_steps": 10})
    yield env
    env.close()


def _tiny(**over) -> ResidualRLConfig:
    cfg = dict(env_steps=160, learning_starts=40, utd=0.5, eval_every=0, eval_episodes=4, log_every=40,
               ckpt_every=80, final_eval=False, final_eval_episodes=0, videos=0,
               residual=ResidualConfig(hidden=(16,)),
               learner=LearnerConfig(num_critics=2, critic_hidden=(16,), batch_size=16, critic_warmup=10))
    cfg.update(over)
    return ResidualRLConfig(**cfg)


class BiasedExpert(ExpertPolicy):
    """The scripted expert with a constant action offset: a deliberately bad base."""

    def __init__(self, env, bias):
        super().__init__(env)
        self.bias = np.asarray(bias, np.float32)

    def act(self, obs_history):
        return np.clip(super().act(obs_history) + self.bias, -1.0, 1.0)


def test_a_base_for_another_task_is_refused_before_training(small_env, tmp_path):
    push = sim.make("push", num_envs=1)
    try:
        base = ExpertPolicy(push)
    finally:
        push.close()
    with pytest.raises(SpecMismatch, match="task: policy 'push', env 'lift'"):
        train(small_env, base, _tiny(), tmp_path / "run")
    assert not (tmp_path / "run").exists(), "nothing is written before the spec check"


def test_training_resumes_from_its_latest_checkpoint(small_env, tmp_path):
    run = tmp_path / "run"
    first = train(small_env, None, from_scratch(_tiny()), run)
    assert first["env_steps"] == 160 and first["resumed_from"] is None and first["updates"] > 0
    latest = json.loads((run / "checkpoints" / "latest.json").read_text())
    assert latest["step"] == 160
    assert load_policy(run / "checkpoints" / latest["path"]).kind == "residual"  # a BasePolicy checkpoint too

    ws = ResidualWorkspace(run, from_scratch(_tiny(env_steps=320)), small_env, None)
    assert ws.try_resume()
    assert ws.env_steps == 160 and ws.learner.updates == first["updates"] and ws.replay.written == 160 // 4
    assert ws.stats_frozen

    second = train(small_env, None, from_scratch(_tiny(env_steps=320)), run)  # a longer budget may continue
    assert second["resumed_from"] == 160 and second["env_steps"] == 320
    assert second["updates"] == first["updates"] + 160 // 2  # utd 0.5: every later transition owed its update
    history = json.loads((run / "checkpoints" / "latest.json").read_text())
    assert history["step"] == 320
    assert (run / "policy" / "config.json").is_file() and (run / "curves.png").is_file()


def test_resume_with_a_changed_config_names_the_differing_keys(small_env, tmp_path):
    run = tmp_path / "run"
    train(small_env, None, _tiny(env_steps=80), run)
    changed = _tiny(env_steps=160, residual=ResidualConfig(hidden=(16,), scale=0.3),
                    learner=LearnerConfig(num_critics=2, critic_hidden=(16,), batch_size=16, critic_warmup=10,
                                          gamma=0.9))
    with pytest.raises(ResumeMismatch) as e:
        train(small_env, None, changed, run)
    assert "learner.gamma (0.99 -> 0.9)" in str(e.value) and "residual.scale (0.5 -> 0.3)" in str(e.value)


class NaNRewardAfter:
    """The env, but its rewards turn NaN after `steps` vector steps (a diverging reward model, say)."""

    def __init__(self, env, steps):
        self.env, self.left = env, steps

    def __getattr__(self, name):
        return getattr(self.env, name)

    def step(self, action):
        obs, reward, done, info = self.env.step(action)
        self.left -= 1
        return obs, (reward * np.nan if self.left < 0 else reward), done, info


def test_nan_loss_stops_training_and_keeps_the_last_good_checkpoint(small_env, tmp_path):
    run = tmp_path / "run"
    with pytest.raises(FloatingPointError, match=r"critic loss is nan at update \d+ \(env step \d+\); training "
                                                 r"stopped, the last good checkpoint is kept in"):
        train(NaNRewardAfter(small_env, 25), None, _tiny(reward="env", env_steps=400), run)
    latest = json.loads((run / "checkpoints" / "latest.json").read_text())
    assert latest["step"] == 80  # saved at 80 env steps; the rewards turned NaN after 100
    policy = load_policy(run / "checkpoints" / latest["path"])
    assert all(np.isfinite(v.numpy()).all() for v in policy.state_tensors().values())


def test_bad_training_config_values_are_named():
    with pytest.raises(ValueError, match="utd=0 must be a number > 0"):
        ResidualRLConfig(utd=0)
    with pytest.raises(ValueError, match="reward='dense'; valid: success, env"):
        ResidualRLConfig(reward="dense")
    with pytest.raises(ValueError, match=r"unknown rl key\(s\) \['env_step'\]; valid keys: \[.*'env_steps'"):
        from_mapping(ResidualRLConfig, {"env_step": 10}, "rl")
    assert from_mapping(ResidualRLConfig, {"learner": {"n_step": 5}}).learner.n_step == 5


def test_short_residual_training_fixes_a_biased_base(tmp_path):
    """Easy setting: lift with 40-step episodes; the base is the scripted expert pushed off in x (about a
    third of its episodes succeed); 20 expert demos. 2400 env steps (~500 updates) bring it near 90%."""
    from robot_rl.data import EpisodeStore
    from robot_rl.data.collect import collect
    from sim.experts import make_expert

    env = sim.make("lift", num_envs=16, threads=1, task_config={"episode_steps": 40})
    try:
        with EpisodeStore.open(tmp_path / "demos.zarr", "a") as store:
            collect(env, make_expert(env, noise=0.1), store, 20, seed=77)
        demos = EpisodeStore.open(tmp_path / "demos.zarr")
        base = BiasedExpert(env, (0.36, 0.0, 0.0, 0.0))
        cfg = ResidualRLConfig(
            env_steps=2400, learning_starts=800, utd=0.25, eval_every=0, eval_episodes=32, log_every=800,
            ckpt_every=10_000, final_eval_episodes=0, videos=0, seed=0, residual=ResidualConfig(scale=0.2, hidden=(64, 64)),
            learner=LearnerConfig(num_critics=4, critic_hidden=(64, 64), critic_warmup=100))
        before = evaluate_policy(env, base, cfg.eval_episodes, seed=cfg.eval_seed)["success_rate"]
        result = train(env, base, cfg, tmp_path / "run", demo_store=demos)
    finally:
        env.close()
    after = result["final_eval"]["success_rate"]
    assert before <= 0.5 and after >= before + 0.3, (before, after)
