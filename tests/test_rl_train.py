"""Residual RL training: bad inputs stop before training, checkpoints resume, NaN stops with the last good
checkpoint kept, and a short run fixes a deliberately biased base on lift."""

from __future__ import annotations

from robot_rl.common.config import from_mapping
import json

import numpy as np
import pytest

from robot_rl import sim
from robot_rl.policies import SpecMismatch, load_policy
from robot_rl.policies.expert import ExpertPolicy
from robot_rl.evaluation import evaluate_policy
from robot_rl.rl.learner import LearnerConfig
from robot_rl.policies.residual import ResidualConfig
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
    with pytest.raises(ValueError, match=r"env_steps=4999 is fewer than learning_starts=5000: the budget ends "
                                         r"before the first gradient update.*Raise env_steps \(e.g. 50000\)"):
        ResidualRLConfig(env_steps=4999)


def _eval(k, n=100):
    from robot_rl.evaluation import wilson_interval

    return {"success_rate": k / n, "successes": k, "episodes": n, "success_ci95": list(wilson_interval(k, n))}


def test_the_watch_reports_a_zero_base_and_a_long_stretch_below_the_base_once():
    from robot_rl.rl.watch import EvalWatch

    w = EvalWatch(below_base_window=40_000)
    assert "succeeded in 0 of 100 evaluation episodes" in w.base(_eval(0)) and "mode=scratch" in w.warnings[0]
    w = EvalWatch(below_base_window=40_000)
    assert w.base(_eval(40)) is None and w.best == {"env_steps": 0, "success_rate": 0.4, "episodes": 100}
    assert w.after(_eval(33), 20_000) == (False, None)  # 95% CI reaches 0.4: not below
    assert w.after(_eval(20), 40_000) == (False, None) and w.below_since == 40_000
    assert w.after(_eval(10), 60_000) == (False, None)  # 20,000 steps below: inside the window
    improved, msg = w.after(_eval(15), 80_000)
    assert not improved and "since env step 40000 (40000 env steps > rl.below_base_window=40000)" in msg
    assert "env step 0, 0.40" in msg
    assert w.after(_eval(5), 100_000) == (False, None)  # said once per stretch
    assert w.after(_eval(45), 120_000) == (True, None) and w.below_since is None and not w.warned
    assert w.best["env_steps"] == 120_000
    again = EvalWatch(40_000)
    again.load_state(w.state())  # a resumed run keeps its best and its stretch
    assert again.best == w.best and again.base_eval == w.base_eval and len(again.warnings) == 1
    assert EvalWatch(below_base_window=0).after(_eval(0), 10**6) == (True, None)


def test_policy_is_the_best_evaluated_policy_not_the_last(small_env, tmp_path):
    """keep_best: an earlier evaluation beat the last policy's final one; the earlier policy is re-evaluated on
    the final episodes and kept when it wins there too, else the last one stays."""
    import torch

    ws = ResidualWorkspace(tmp_path / "run", _tiny(), small_env, ExpertPolicy(small_env))
    ws.watch.base(_eval(60))
    ws.save_best()  # env step 0: the zero residual, i.e. the base
    zero = {k: v.clone() for k, v in ws.policy.actor.state_dict().items()}
    ws.env_steps = 160
    with torch.no_grad():
        for p in ws.policy.actor.parameters():
            p.add_(1.0)  # training "made it worse"
    worse = {k: v.clone() for k, v in ws.policy.actor.state_dict().items()}
    final = _eval(20) | {"episode_ids": []}
    kept = ws.keep_best(final, lambda: _eval(15) | {"episode_ids": []})  # the best does worse on the final set
    assert kept["policy_from"] == {"env_steps": 160, "which": "last"}
    assert all(torch.equal(v, worse[k]) for k, v in ws.policy.actor.state_dict().items())
    kept = ws.keep_best(final, lambda: _eval(55) | {"episode_ids": []})
    assert kept["policy_from"] == {"env_steps": 0, "which": "best"} and kept["success_rate"] == 0.55
    assert kept["last_eval"]["success_rate"] == 0.2
    assert all(torch.equal(v, zero[k]) for k, v in ws.policy.actor.state_dict().items())


def test_a_run_from_a_zero_base_says_so_and_keeps_its_best_policy(small_env, tmp_path):
    """10-step lift episodes: the expert never finishes one, a 0% base. The run warns before training, evaluates
    it as env step 0, and checkpoints/best/ + metrics name the policy policy/ is."""
    run = tmp_path / "run"
    with pytest.warns(UserWarning, match="succeeded in 0 of 4 evaluation episodes"):
        result = train(small_env, ExpertPolicy(small_env), _tiny(eval_every=80, final_eval=True), run)
    assert result["base_eval"]["successes"] == 0 and result["best_eval"]["success_rate"] == 0
    assert result["best_eval"]["env_steps"] == 80  # the later of equal evaluations
    assert "residual RL from a 0% base" in result["warnings"][0]
    best = json.loads((run / "checkpoints" / "best" / "config.json").read_text())
    assert best["kind"] == "residual" and (run / "checkpoints" / "best" / "model.safetensors").is_file()
    assert result["final_eval"]["policy_from"]["which"] == "last"  # nothing beat 0%: the last one stays


def test_without_a_final_evaluation_policy_is_the_best_evaluated_policy(small_env, tmp_path):
    """final_eval=false: the last policy is never evaluated, so policy/ is checkpoints/best/ (here the evaluation at
    env step 80, the later of two 0% ones) and the result says so; with no evaluation at all it is the last policy."""
    import torch

    from robot_rl.common import checkpoint

    run = tmp_path / "run"
    with pytest.warns(UserWarning, match="succeeded in 0 of 4"):
        result = train(small_env, ExpertPolicy(small_env), _tiny(eval_every=80, final_eval=False), run)
    assert result["final_eval"] is None and result["best_eval"] == {"env_steps": 80, "success_rate": 0.0, "episodes": 4}
    assert result["policy_from"] == {"env_steps": 80, "which": "best", "by": "evaluations"}  # not the last (160)
    kept, best = checkpoint.load(run / "policy")[0], checkpoint.load(run / "checkpoints" / "best")[0]
    assert kept.keys() == best.keys() and all(torch.equal(kept[k], best[k]) for k in kept)
    result = train(small_env, ExpertPolicy(small_env), _tiny(), tmp_path / "plain")
    assert "policy_from" not in result and result["best_eval"] is None


def test_short_residual_training_fixes_a_biased_base(tmp_path):
    """Easy setting: lift with 40-step episodes; the base is the scripted expert pushed off in x (about a
    third of its episodes succeed); 20 expert demos. 2400 env steps (~500 updates) bring it near 90%."""
    from robot_rl.data import EpisodeStore
    from robot_rl.data.collect import collect
    from robot_rl.sim.experts import make_expert

    env = sim.make("lift", num_envs=16, threads=1, task_config={"episode_steps": 40})
    try:
        with EpisodeStore.open(tmp_path / "demos.zarr", "a") as store:
            collect(env, make_expert(env, noise=0.1), store, 20, seed=77)
        demos = EpisodeStore.open(tmp_path / "demos.zarr")
        base = BiasedExpert(env, (0.12, 0.0, 0.0, 0.0))  # the expert corrects 35% of an error per tick: a 2.4 mm
        # push per step leaves it ~7 mm off, about a third of its episodes succeed (0.31 over 32)
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
