"""Learned rewards under optimization: the classifier's success paying once per env episode (or ending it), operator
labels within their budget, the classifier refitted on the labelled episodes, the guard's checks and rollbacks."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from robot_rl import sim
from robot_rl.policies.expert import ExpertPolicy
from robot_rl.policies.residual import ResidualConfig, ResidualPolicy
from robot_rl.reward import LearnedReward, RewardModel, RewardSpec
from robot_rl.reward.episodes import Episodes
from robot_rl.reward.online import LabelConfig, OnlineReward
from robot_rl.reward.shaping import first_fires, relabel_replay
from robot_rl.rl.guard import Guard, GuardConfig
from robot_rl.rl.learner import LearnerConfig
from robot_rl.rl.replay import Replay
from robot_rl.rl.rollout import Collector
from robot_rl.rl.train import ResidualRLConfig, ResidualWorkspace
from tests.test_reward_rl import env  # noqa: F401  (the module's lift env: 3 envs, 12-step episodes)


def _firing_model(env, quantile=0.5) -> RewardModel:
    """An untrained model whose threshold makes the classifier fire on about half of the start states."""
    torch.manual_seed(0)
    model = RewardModel.build(RewardSpec(task="lift", obs_dims=dict(env.obs_dims)), hidden=(16,))
    model.threshold = float(np.quantile(model.success_prob(env.reset(0)), quantile))
    return model


def _collect(env, model, mode, steps=36, online=None):
    policy = ResidualPolicy.build(None, ResidualConfig(), env=env)
    replay = Replay(1000, env.num_envs, sum(env.obs_dims.values()), env.action_dim)
    col = Collector(env, policy, replay, reward="learned", explore_std=0.3, seed=0, online=online,
                    learned=LearnedReward(model, 0.9, 0.0, success="classifier"), classifier_success=mode)
    col.start(seed=0)
    for _ in range(steps):
        col.step()
    return replay, policy, col


def _episodes(d, e):
    """Row ranges [start, end) of env e's env episodes in a replay's `ended` column."""
    ends = np.nonzero(d["ended"][:, e])[0]
    starts = np.concatenate([[0], ends[:-1] + 1])
    return list(zip(starts, ends + 1))


def test_first_fires_keeps_the_first_hit_of_each_episode():
    hit = np.array([0, 1, 1, 0, 1, 0, 0, 1, 1, 1], bool)
    ended = np.array([0, 0, 0, 1, 0, 0, 0, 0, 1, 0], bool)
    assert first_fires(hit, ended).tolist() == [1, 1, 0, 0, 1, 0, 0, 0, 0, 1]
    assert first_fires(np.zeros(3, bool), np.zeros(3, bool)).all()


def test_once_pays_only_the_first_fire_of_an_env_episode_which_runs_on(env):
    model = _firing_model(env)
    replay, policy, _ = _collect(env, model, "once")
    d, hits_seen = replay.data, 0
    for e in range(env.num_envs):
        for a, b in _episodes(d, e):
            term = d["terminated"][a:b, e]
            assert term.sum() <= 1, (e, a, b)  # one payment per env episode
            assert np.array_equal(d["reward"][a:b, e], term.astype(np.float32))  # shaping off: reward = success
            hits_seen += term.sum()
            # the fire ends the learner's episode: the env's rows after it are kept but marked (never sampled)
            after = np.cumsum(term) - term > 0
            assert np.array_equal(d["after_claim"][a:b, e], after), (e, a, b)
        # the env's episodes are its own 12 steps: a fire does not end them
        assert all(b - a == 12 for a, b in _episodes(d, e)[:-1] if b <= 36)
    assert hits_seen > 0
    every, _, _ = _collect(env, model, "every")
    assert every.data["terminated"].sum() > d["terminated"].sum()  # the same classifier fires again within episodes


def test_end_ends_the_env_episode_at_the_first_fire(env):
    model = _firing_model(env, quantile=0.3)
    replay, policy, col = _collect(env, model, "end", steps=20)
    d = replay.data
    assert np.array_equal(d["ended"][:20], d["terminated"][:20] | d["truncated"][:20])  # fires and time limits
    lengths = [b - a for e in range(env.num_envs) for a, b in _episodes(d, e)]
    assert min(lengths) < 12 and d["terminated"][:20].sum() == sum(  # each fire ended its episode there
        d["terminated"][a:b, e].sum() for e in range(env.num_envs) for a, b in _episodes(d, e))


def test_relabel_once_pays_the_new_classifier_s_first_fire_per_episode(env):
    model = _firing_model(env)
    replay, policy, _ = _collect(env, model, "once")
    model.threshold = float(np.quantile(model.success_prob(env.reset(0)), 0.2))  # fires more now
    learned = LearnedReward(model, 0.9, 0.0, success="classifier")
    relabel_replay(replay, learned, policy.obs_keys, dict(env.obs_dims), once=True)
    d = replay.data
    assert all(d["terminated"][a:b, e].sum() <= 1 for e in range(env.num_envs) for a, b in _episodes(d, e))
    for e in range(env.num_envs):  # the rows after each new first fire are past the learner's episode
        for a, b in _episodes(d, e):
            term = d["terminated"][a:b, e]
            assert np.array_equal(d["after_claim"][a:b, e], np.cumsum(term) - term > 0)
    once = int(d["terminated"].sum())
    assert d["after_claim"].any()
    relabel_replay(replay, learned, policy.obs_keys, dict(env.obs_dims), once=False)
    assert d["terminated"].sum() > once > 0  # every fire pays again
    assert not d["after_claim"].any()  # and every row is the learner's


def test_labels_stay_within_their_budget_and_false_claims_raise_one_warning(env):
    model = _firing_model(env)
    online = OnlineReward(LearnedReward(model, 0.9, 0.0), LabelConfig(fraction=0.1, watch_claims=4, refit_every=0),
                          num_envs=1, max_steps=5)
    obs = {k: np.zeros((1, d), np.float32) for k, d in env.obs_dims.items()}
    for i in range(95):
        online.start([0], obs)
        online.push(obs)
        online.end([0], claimed=[True], sim_success=[i < 40])  # the first 40 claims were right, the rest false
    assert online.finished == 95 and online.labelled == 9  # one in ten, never more
    assert online.counts["claimed_true"] == 4 and online.counts["claimed_false"] == 5
    warnings = online.pop_warnings()
    assert len(warnings) == 1 and "reward hacking" in warnings[0] and "3 of the last 4" in warnings[0]
    assert online.pop_warnings() == [] and online.precision == 0.0
    with pytest.raises(ValueError, match=r"rl\.labels\.fraction=0 gives no operator labels.*refit_every=5"):
        LabelConfig(fraction=0.0).check_budget()
    with pytest.raises(ValueError, match=r"labels\.source=none"):
        LabelConfig(source="none").check_budget()
    LabelConfig(fraction=0.0, refit_every=0).check_budget()  # no labels and nothing that needs them


def test_a_refit_stops_false_claims_and_keeps_true_successes():
    """1-D task: successes climb x from 0 to 2, failures stall at 1. A classifier that fires from x = 1.2 up (its
    threshold set low) claims the stalled states of labelled failures; after a refit on them and on its original
    data it no longer does, and still fires at the success end."""
    from robot_rl.reward.train import RewardTrainConfig, _fit
    from robot_rl.reward import labels as L

    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    spec = RewardSpec(task="lift", obs_dims={"x": 1})
    model = RewardModel.build(spec, hidden=(32,))
    won = [np.linspace(0, 2, 20) for _ in range(20)]
    lost = [np.linspace(0, 1, 20) + rng.normal(0, 0.02, 20) for _ in range(20)]
    xs = np.concatenate(won + lost)[:, None].astype(np.float32)
    ends = np.cumsum([20] * 40)
    success = np.array([True] * 20 + [False] * 20)
    label, used = L.success_targets(ends, success)
    rows = np.nonzero(used)[0]
    w = np.where(label[rows], (~label[rows]).sum() / label[rows].sum(), 1.0)
    cfg = RewardTrainConfig(steps=300, batch_size=128, log_every=300)
    _fit(model.success_net, {"x": xs}, rows, label[rows].astype(np.float32), w, cfg, rng, _Null(), "success")
    model.threshold = float(model.success_prob({"x": np.array([[1.3]], np.float32)})[0])  # fires from ~1.3 up
    original = Episodes({"x": xs}, ends, success, np.array(["expert"] * 40), np.zeros(40, int), None, None)
    online = OnlineReward(LearnedReward(model, 0.9, 0.0), LabelConfig(refit_every=2, refit_steps=300),
                          num_envs=1, max_steps=30, original=original, seed=0)

    def episode(path, claimed, sim_success):
        online.start([0], {"x": path[:1, None].astype(np.float32)})
        for x in path[1:]:
            online.push({"x": np.array([[x]], np.float32)})
        online.end([0], [claimed], [sim_success])

    stall = np.concatenate([np.linspace(0, 1.4, 10), np.full(5, 1.4)])  # the classifier fires at 1.4: false
    assert model.success({"x": np.array([[1.4]], np.float32)})[0]
    online.cfg = LabelConfig(fraction=1.0, refit_every=2, refit_steps=300)
    episode(stall, True, False)
    episode(np.linspace(0, 2, 20), True, True)
    assert online.refit_due()
    figures = online.refit()
    assert figures["false_claims_still_firing"] == 0.0 and figures["successes_detected"] == 1.0
    assert not model.success({"x": np.array([[1.4]], np.float32)})[0]
    assert model.success({"x": np.array([[2.0]], np.float32)})[0]
    assert not online.refit_due()  # nothing new disagreed


class _Null:
    def scalar(self, *a, **k):
        pass


def _check(k, n):
    from robot_rl.evaluation import wilson_interval

    return {"successes": k, "episodes": n, "success_rate": k / n, "success_ci95": list(wilson_interval(k, n)),
            "mean_length": 10.0}


def test_guard_rides_out_a_dip_rolls_back_on_hacking_and_stops_at_the_best_policy():
    g = Guard(GuardConfig(max_rollbacks=1, patience=3))
    assert g.record(_check(40, 50), 0) == "best"
    assert g.record(_check(18, 20), 20_000) == "best"  # 0.90 >= 0.80
    assert g.record(_check(15, 20), 40_000) == "vouched"  # not below the base, not the best
    assert g.record(_check(3, 20), 60_000) == "below"  # CI 0.05-0.36, below 0.80: a dip, training goes on
    assert g.record(_check(2, 20), 70_000) == "below" and not g.warnings
    assert g.record(_check(16, 20), 80_000) == "vouched"  # it recovered: the count starts over
    assert g.record(_check(3, 20), 90_000, hacking=True) == "rollback"  # below while the labels show hacking: at once
    assert "the labels show reward hacking" in g.warnings[-1]
    assert "rolled back to the policy of env step 20000 (checked 0.90), rollback 1 of" in g.warnings[-1]
    assert g.record(_check(2, 20), 100_000, hacking=True) == "stop"  # rollbacks spent
    assert g.stopped_at == 100_000 and "training stopped at the policy of env step 20000" in g.warnings[-1]
    assert "(rl.guard.max_rollbacks=1 spent)" in g.warnings[-1]  # the warning names the setting that acted
    assert g.labels == 190 and g.robot_steps == 1900 and g.best["env_steps"] == 20_000
    dip = Guard(GuardConfig(patience=2))
    dip.record(_check(40, 50), 0)
    assert [dip.record(_check(2, 20), s) for s in (20_000, 40_000)] == ["below", "stop"]  # on_regression=stop
    assert "2 checks in a row" in dip.warnings[-1] and dip.stopped_at == 40_000
    assert "(rl.guard.on_regression=stop)" in dip.warnings[-1]
    climb = Guard(GuardConfig(patience=3))  # a dip that climbs (peg_insert's checks on learned rewards) runs on
    climb.record(_check(44, 50), 0)
    assert [climb.record(_check(k, 20), 20_000 * (i + 1)) for i, k in enumerate((1, 12, 8, 14, 13))] == [
        "below"] * 5 and climb.below_in_a_row == 2 and not climb.warnings
    assert climb.record(_check(12, 20), 120_000) == "stop"  # 3 in a row no better than the dip's best (14 of 20)
    assert "3 checks in a row without climbing" in climb.warnings[-1]
    warn = Guard(GuardConfig(on_regression="warn", patience=1))
    warn.record(_check(40, 50), 0)
    assert warn.record(_check(0, 20), 20_000) == "warn" and warn.rollbacks == 0 and warn.stopped_at is None
    assert warn.warnings[-1].endswith("training goes on (rl.guard.on_regression=warn)")
    with pytest.raises(ValueError, match="on_regression='retry'"):
        GuardConfig(on_regression="retry")
    with pytest.raises(ValueError, match="on_hacking='stop'"):
        GuardConfig(on_hacking="stop")


def test_a_check_below_the_base_rolls_the_learner_back_to_the_best_policy(tmp_path):
    """Lift with the scripted expert as base (it succeeds): the base's check is the best policy; a residual made
    bad on purpose fails its check, and the actor, critics and optimizers return to the base's."""
    from robot_rl.common.run_log import RunLog

    env = sim.make("lift", num_envs=4, threads=1, task_config={"episode_steps": 60})
    try:
        model = _firing_model(env, quantile=1.0)
        path = tmp_path / "reward"
        model.info = {}
        model.save(path)
        cfg = ResidualRLConfig(env_steps=400, learning_starts=40, eval_every=0, final_eval=False, videos=0,
                               reward="learned", reward_model=str(path), shaping=0.0,
                               residual=ResidualConfig(hidden=(16,), scale=1.0),
                               learner=LearnerConfig(num_critics=2, critic_hidden=(16,), batch_size=16),
                               labels=LabelConfig(refit_every=0),
                               guard=GuardConfig(episodes=4, base_episodes=4, max_rollbacks=1, patience=1,
                                                 on_regression="rollback"))
        ws = ResidualWorkspace(tmp_path / "run", cfg, env, ExpertPolicy(env))
        log = RunLog(tmp_path / "run")
        assert ws.check(log, 4) == "best" and ws.guard.base["successes"] >= 3
        base_actor = {k: v.clone() for k, v in ws.policy.actor.state_dict().items()}
        base_critic = {k: v.clone() for k, v in ws.learner.critic.state_dict().items()}
        ws.env_steps, ws.learner.updates = 200, 70  # as if the learner had updated 70 times since the base's check
        with torch.no_grad():
            for p in list(ws.policy.actor.parameters()) + list(ws.learner.critic.parameters()):
                p.add_(torch.randn_like(p))  # the residual now drives the arm off at full scale
        assert ws.check(log, 4) == "rollback"
        assert all(torch.equal(v, base_actor[k]) for k, v in ws.policy.actor.state_dict().items())
        assert all(torch.equal(v, base_critic[k]) for k, v in ws.learner.critic.state_dict().items())
        assert "rolled back to the policy of env step 0" in ws.guard.warnings[0]
        assert ws.learner.updates == 0 and ws.guard.discarded_updates == 70  # undone, and still counted as done
        log.close()
    finally:
        env.close()


def test_a_weak_reward_model_ends_no_worse_than_its_base_and_says_why(tmp_path):
    """A reward model trained on a handful of episodes (3 demos, 3 failures) drives a full-scale residual on the
    scripted expert off course within a few hundred env steps; the guard's checks catch it, roll back, then stop, and
    policy/ is the best checked policy, which does as well as the base."""
    from robot_rl.common.run_log import RunLog
    from robot_rl.data import EpisodeStore
    from robot_rl.data.collect import collect
    from robot_rl.reward.episodes import load_episodes
    from robot_rl.reward.train import RewardTrainConfig, train_reward
    from robot_rl.rl.train import train
    from robot_rl.sim.experts import make_expert

    torch.manual_seed(0)
    env = sim.make("lift", num_envs=8, threads=1, task_config={"episode_steps": 40})
    try:
        with EpisodeStore.open(tmp_path / "demos.zarr", "a") as s:
            collect(env, make_expert(env, noise=0.1, seed=0), s, 3, seed=1)
        with EpisodeStore.open(tmp_path / "fails.zarr", "a") as s:
            collect(env, make_expert(env, noise=1.0, seed=1), s, 3, seed=2, source="policy")
        stores = [EpisodeStore.open(tmp_path / "demos.zarr"), EpisodeStore.open(tmp_path / "fails.zarr")]
        assert [s.episode_attr("success").tolist() for s in stores] == [[True] * 3, [False] * 3]
        spec = RewardSpec(task="lift", obs_dims=dict(env.obs_dims))
        log = RunLog(tmp_path / "reward")
        train_reward(tmp_path / "reward", RewardTrainConfig(steps=100, batch_size=64, val_fraction=0.34,
                                                            test_fraction=0.34), load_episodes(stores, spec), spec, log)
        log.close()
        cfg = ResidualRLConfig(
            env_steps=2400, time_budget_s=0, learning_starts=200, eval_every=0, final_eval_episodes=16, videos=0,
            reward="learned", reward_model=str(tmp_path / "reward"), explore_std=0.3,
            residual=ResidualConfig(scale=1.0, hidden=(32, 32)),
            learner=LearnerConfig(num_critics=2, critic_hidden=(32, 32), batch_size=64, critic_warmup=50),
            labels=LabelConfig(refit_every=2, watch_claims=4),
            guard=GuardConfig(every=400, episodes=8, base_episodes=16, patience=1, on_regression="rollback",
                              max_rollbacks=1))
        with pytest.warns(UserWarning, match="the policy got worse"):
            result = train(env, ExpertPolicy(env), cfg, tmp_path / "run")
    finally:
        env.close()
    g = result["guard"]
    assert g["rollbacks"] == 1 and g["stopped_at"] is not None and g["stopped_at"] < 2400
    assert any("training stopped at the policy of env step" in w for w in result["warnings"])
    kept = result["final_eval"]["policy_from"]
    assert kept["by"] == "checks" and kept["env_steps"] == g["best"]["env_steps"]
    assert g["best"]["success_rate"] >= g["base"]["success_rate"]  # the base, or a check at least as good
    assert result["final_eval"]["success_rate"] >= 0.75  # the expert base's level (0.94 checked), not the broken policy
    assert result["labels"]["total"] == result["labels"]["labelled"] + sum(c["episodes"] for c in g["checks"])


def test_a_learned_reward_run_resumes_with_its_labels_refitted_classifier_and_checks(tmp_path):
    """Every episode labelled and a refit every 2 labels: the checkpoint keeps the labelled episodes, the refitted
    classifier and its threshold, the guard's checks and best policy; a resumed run goes on from them."""
    from robot_rl.reward import load_reward_model
    from robot_rl.rl.train import train

    env = sim.make("lift", num_envs=4, threads=1, task_config={"episode_steps": 10})
    try:
        model = _firing_model(env, quantile=0.3)
        model.info = {}
        model.save(tmp_path / "reward")

        def cfg(steps):
            return ResidualRLConfig(
                env_steps=steps, learning_starts=40, eval_every=0, final_eval=False, videos=0, log_every=40,
                ckpt_every=80, reward="learned", reward_model=str(tmp_path / "reward"), shaping=0.0,
                residual=ResidualConfig(hidden=(16,)),
                learner=LearnerConfig(num_critics=2, critic_hidden=(16,), batch_size=16, critic_warmup=10),
                labels=LabelConfig(fraction=1.0, refit_every=2, refit_steps=20),
                guard=GuardConfig(every=80, episodes=2, base_episodes=2))

        run = tmp_path / "run"
        first = train(env, ExpertPolicy(env), cfg(160), run)
        assert first["labels"]["labelled"] == first["labels"]["training_episodes"] > 0  # fraction 1: every one
        assert first["labels"]["refits"] > 0 and (run / "reward_model" / "config.json").is_file()
        refitted = load_reward_model(run / "reward_model")
        ws = ResidualWorkspace(run, cfg(240), env, ExpertPolicy(env))
        assert ws.try_resume()
        assert ws.online.labelled == first["labels"]["labelled"] and ws.online.refits == first["labels"]["refits"]
        assert ws.learned_reward.model.threshold == pytest.approx(refitted.threshold)
        net, saved = ws.learned_reward.model.success_net.state_dict(), refitted.success_net.state_dict()
        assert all(torch.equal(net[k], saved[k]) for k in saved)
        assert len(ws.online.episodes) == first["labels"]["labelled"]
        assert [c["env_steps"] for c in ws.guard.checks] == [c["env_steps"] for c in first["guard"]["checks"][:-1]]
        assert ws.best_state is not None and ws.guard.best is not None
        second = train(env, ExpertPolicy(env), cfg(240), run)
    finally:
        env.close()
    assert second["resumed_from"] == 160 and second["labels"]["labelled"] > first["labels"]["labelled"]
    assert second["guard"]["checks"][0]["env_steps"] == 0  # the base's check is not repeated
    assert sum(c["env_steps"] == 0 for c in second["guard"]["checks"]) == 1
