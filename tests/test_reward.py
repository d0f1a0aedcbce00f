"""Learned rewards (robot_rl/reward): metrics, labels, shaping identities, classifier thresholding, checkpoints,
and the bad inputs (no failures, another task / observation spec)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from robot_rl.policies.base import SpecMismatch
from robot_rl.common.checkpoint import CheckpointError
from robot_rl.reward import LearnedReward, RewardModel, RewardSpec, load_reward_model, potential_shaping
from robot_rl.reward import labels as L
from robot_rl.reward.metrics import auroc, rankdata, rates, spearman, threshold_for_tpr
from robot_rl.reward.episodes import Episodes, RewardDataError, check_outcomes

torch.set_num_threads(1)
SPEC = RewardSpec(task="lift", obs_dims={"proprio": 3, "object": 2})


# ---- metrics -----------------------------------------------------------------------------------------
def test_spearman_is_rank_based_and_averages_ties():
    x = np.array([0.1, 0.5, 0.2, 0.9, 0.3])
    assert spearman(x, np.exp(5 * x)) == pytest.approx(1.0)  # any increasing transform
    assert spearman(x, -x) == pytest.approx(-1.0)
    assert rankdata([3.0, 1.0, 3.0, 2.0]).tolist() == [3.5, 1.0, 3.5, 2.0]
    # hand computed: ranks x = [1, 2.5, 2.5, 4], y = [1, 2, 3, 4] -> Pearson of ranks
    rx, ry = np.array([1, 2.5, 2.5, 4]) - 2.5, np.array([1, 2, 3, 4]) - 2.5
    expected = (rx * ry).sum() / np.sqrt((rx ** 2).sum() * (ry ** 2).sum())
    assert spearman([0.0, 1.0, 1.0, 2.0], [1, 2, 3, 4]) == pytest.approx(expected)
    assert np.isnan(spearman([1.0, 1.0, 1.0], [1, 2, 3]))


def test_auroc_counts_ordered_pairs_and_half_ties():
    assert auroc([0.9, 0.8, 0.1, 0.2], [1, 1, 0, 0]) == 1.0
    assert auroc([0.1, 0.2, 0.9, 0.8], [1, 1, 0, 0]) == 0.0
    assert auroc([0.5, 0.5], [1, 0]) == 0.5
    # positives 0.6, 0.3 vs negatives 0.4, 0.1: 3 of 4 pairs ordered
    assert auroc([0.6, 0.3, 0.4, 0.1], [1, 1, 0, 0]) == pytest.approx(0.75)
    assert np.isnan(auroc([0.1, 0.2], [0, 0]))


def test_threshold_for_tpr_is_the_highest_that_keeps_the_recall():
    pos = np.array([0.95, 0.9, 0.8, 0.3])
    assert threshold_for_tpr(pos, 0.75) == 0.8  # 3 of 4 at or above
    assert threshold_for_tpr(pos, 1.0) == 0.3
    assert threshold_for_tpr(pos, 0.5) == 0.9
    r = rates(np.array([0.95, 0.9, 0.8, 0.3, 0.85, 0.1]), np.array([1, 1, 1, 1, 0, 0], bool), 0.8)
    assert (r["tpr"], r["fpr"], r["precision"]) == (0.75, 0.5, 0.75)


# ---- labels ------------------------------------------------------------------------------------------
ENDS = np.array([4, 6, 10])  # episodes of 4, 2 and 4 steps
OUTCOME = np.array([True, False, True])


def test_time_targets_rise_within_successes_and_leave_failures_to_transfer():
    y = L.time_targets(ENDS, OUTCOME)
    assert y.tolist() == pytest.approx([0, 0.25, 0.5, 0.75, 0, 0, 0, 0.25, 0.5, 0.75])


def test_failed_states_take_the_progress_of_the_nearest_successful_states():
    ref = np.array([[0.0], [1.0], [2.0], [3.0]])
    ref_y = np.array([0.0, 0.25, 0.5, 0.75])
    # k=1, no discount: an exact match gets exactly that state's target, whatever time it is reached at
    assert L.transfer_targets(np.array([[2.0], [2.0], [0.0]]), ref, ref_y, k=1, distance_scale=0.0).tolist() == \
        [0.5, 0.5, 0.0]
    # with the discount, a state far from every successful one is pulled toward 0 (nothing to hack there)
    # (the discount is exp(-scale (d / median d)^2): distances 0, 0.1, 0.1, 30 -> median 0.1)
    y = L.transfer_targets(np.array([[3.0], [3.1], [2.1], [33.0]]), ref, ref_y, k=1, distance_scale=0.1)
    assert y[:3] == pytest.approx([0.75, 0.75 * np.exp(-0.1), 0.5 * np.exp(-0.1)], rel=1e-4)
    assert y[3] < 1e-6


def test_progress_targets_never_pay_for_time_in_a_failed_episode():
    # a failed episode that stalls in one state for 5 steps, then undoes back to the start state
    ends = np.array([4, 11])
    feats = np.array([[0.0], [1.0], [2.0], [3.0]] + [[2.0]] * 5 + [[1.0], [0.0]], np.float32)
    y = L.progress_targets(ends, np.array([True, False]), feats, np.ones(11, bool), k=1, distance_scale=0.0)
    assert y[4:9].tolist() == [0.5] * 5  # stalling: constant
    assert y[9] < y[8] and y[10] == 0.0  # undoing: lower


def test_success_targets_mark_the_last_frames_and_leave_a_gap():
    label, used = L.success_targets(ENDS, OUTCOME, positive_frames=1, gap_frames=1)
    assert np.nonzero(label)[0].tolist() == [3, 9]
    assert np.nonzero(~used)[0].tolist() == [2, 8]  # the step before each positive
    label, used = L.success_targets(ENDS, OUTCOME, positive_frames=2, gap_frames=0)
    assert np.nonzero(label)[0].tolist() == [2, 3, 8, 9] and used.all()
    assert not label[4:6].any()  # a failed episode's ending is a negative


def test_an_episode_that_ends_in_its_final_observation_has_that_state_among_its_positives():
    # episodes of 8 and 6 rows, each ending in its final observation (a success state in the first)
    ends = np.array([8, 14])
    label, used = L.success_targets(ends, np.array([True, False]), positive_frames=2, gap_frames=1)
    assert np.nonzero(label)[0].tolist() == [6, 7]  # the last stored step and the success state after it
    assert np.nonzero(~used)[0].tolist() == [5]
    assert not label[8:].any() and used[8:].all()  # a failure's final state is a negative like its others


def test_collected_episodes_keep_their_final_observation_and_the_reward_data_ends_each_with_it(tmp_path):
    """robot-rl-collect records the observation each episode ended in (metadata final_obs): for a success, the
    success state, one step past the last stored one. load_episodes appends it as the episode's last row."""
    import json

    from robot_rl import sim
    from robot_rl.data import EpisodeStore
    from robot_rl.data.collect import collect
    from robot_rl.reward.episodes import final_observations, load_episodes
    from robot_rl.sim.experts import make_expert

    env = sim.make("lift", num_envs=2, threads=1, task_config={"episode_steps": 60})
    try:
        with EpisodeStore.open(tmp_path / "s.zarr", "a") as store:
            collect(env, make_expert(env, noise=0.0), store, 3, seed=0)
        spec = RewardSpec(task="lift", obs_dims=dict(env.obs_dims))
    finally:
        env.close()
    store = EpisodeStore.open(tmp_path / "s.zarr")
    final = final_observations(store, list(spec.obs_dims))
    assert final is not None and {k: v.shape for k, v in final.items()} == {k: (3, d) for k, d in spec.obs_dims.items()}
    data = load_episodes([store], spec)
    assert store.episode_attr("success").all() and data.final_row is not None
    assert data.ends.tolist() == (store.episode_ends + np.arange(1, 4)).tolist()
    assert np.nonzero(data.final_row)[0].tolist() == (data.ends - 1).tolist()
    np.testing.assert_array_equal(data.obs["object"][data.ends - 1], final["object"])
    assert data.gt_success[data.ends - 1].all()  # the final state is where the env said success
    stored_last = store.read("obs/object")[store.episode_ends - 1]
    assert (final["object"][:, 2] > stored_last[:, 2]).all()  # the cube rose in the last step: a later state
    metas = [json.loads(str(m)) for m in store.episode_attr("metadata")]
    assert all(set(m["final_obs"]) == set(spec.obs_dims) for m in metas)


def test_episode_split_is_disjoint_and_stratified():
    success = np.array([True] * 10 + [False] * 10)
    s = L.split_episodes(success, {"val": 0.1, "test": 0.2}, seed=0)
    all_eps = np.concatenate(list(s.values()))
    assert sorted(all_eps.tolist()) == list(range(20))
    for name in ("val", "test"):
        assert success[s[name]].any() and (~success[s[name]]).any()
    assert len(s["test"]) == 4 and len(s["val"]) == 2


def _episodes(success: list[bool], length: int = 5) -> Episodes:
    n = len(success)
    steps = n * length
    return Episodes({"proprio": np.zeros((steps, 3), np.float32), "object": np.zeros((steps, 2), np.float32)},
                    np.arange(1, n + 1) * length, np.array(success), np.array(["expert"] * n), np.zeros(n, int),
                    None, None)


def test_data_without_failures_is_refused_with_how_to_collect_them():
    with pytest.raises(RewardDataError, match=r"0 failed episode.*robot-rl-collect task=lift policy="):
        check_outcomes(_episodes([True] * 6), "lift")
    with pytest.raises(RewardDataError, match="successful episode"):
        check_outcomes(_episodes([False] * 6), "lift")
    check_outcomes(_episodes([True, True, False, False]), "lift")


# ---- shaping -----------------------------------------------------------------------------------------
def _shaped_return(rewards, phis, gamma, lam, terminated):
    """Discounted return of an episode with rewards r_0..r_{T-1} over states s_0..s_T (phis [T+1])."""
    T = len(rewards)
    term = np.zeros(T, bool)
    term[-1] = terminated
    f = potential_shaping(phis[:-1], phis[1:], term, gamma, lam)
    return float(sum(gamma ** t * (rewards[t] + f[t]) for t in range(T)))


def test_potential_terms_telescope_over_an_episode():
    rng = np.random.default_rng(0)
    gamma, lam = 0.97, 2.0
    for T in (1, 5, 40):
        r, phi = rng.random(T), rng.random(T + 1)
        base = float(sum(gamma ** t * r[t] for t in range(T)))
        # terminated (a success): Phi(terminal) = 1, so the shaped return is the return minus lambda Phi(s_0) plus
        # lambda gamma^T, the same bonus for every success at time T
        assert _shaped_return(r, phi, gamma, lam, True) == pytest.approx(base - lam * phi[0] + lam * gamma ** T,
                                                                          abs=1e-5)
        # cut by a time limit: the last potential stays (a critic bootstraps the rest)
        assert _shaped_return(r, phi, gamma, lam, False) == pytest.approx(
            base + lam * (gamma ** T * phi[-1] - phi[0]), abs=1e-5)


def test_a_constant_potential_changes_no_return_ordering():
    rng = np.random.default_rng(1)
    gamma, lam, c = 0.99, 1.0, 0.7
    episodes = [(rng.random(T) * rng.random(), T) for T in rng.integers(3, 60, size=20)]  # distinct returns
    plain = [float(sum(gamma ** t * r[t] for t in range(T))) for r, T in episodes]
    shaped = [_shaped_return(r, np.full(T + 1, c), gamma, lam, False) for r, T in episodes]
    assert np.argsort(plain, kind="stable").tolist() == np.argsort(shaped, kind="stable").tolist()
    offset = [lam * (gamma ** T * c - c) for _, T in episodes]  # cut episodes: lambda (gamma^T c - c)
    assert np.allclose(np.array(shaped), np.array(plain) + offset, atol=1e-5)


def test_shaping_keeps_the_ranking_of_policies_by_discounted_success():
    """Terminations are successes (Phi(terminal) = 1): whatever Phi is, the shaped value of a start state is the
    unshaped one with success reward 1 + lambda gamma, minus lambda Phi(s_0); policies that succeed sooner stay
    ahead, and never succeeding stays last."""
    rng = np.random.default_rng(3)
    gamma, lam, T_max = 0.99, 1.0, 40
    for _ in range(20):
        phi = rng.random(T_max + 1)  # an arbitrary (even misleading) potential along a trajectory
        successes = sorted(rng.choice(np.arange(1, T_max), size=4, replace=False))  # success at step T
        returns = []
        for T in successes:
            r = np.zeros(T)
            r[-1] = 1.0
            returns.append(_shaped_return(r, phi[:T + 1], gamma, lam, True))
        never = _shaped_return(np.zeros(T_max), phi, gamma, lam, False) - lam * gamma ** T_max * phi[-1]
        assert all(a > b for a, b in zip(returns, returns[1:])) and returns[-1] > never


def test_n_step_targets_of_shaped_rewards_telescope_to_the_end_potential():
    from robot_rl.rl.replay import Replay

    rng = np.random.default_rng(2)
    gamma, lam, T = 0.9, 1.5, 10
    phi, r = rng.random(T + 1), rng.random(T)
    term = np.zeros(T, bool)
    term[-1] = True
    f = potential_shaping(phi[:-1], phi[1:], term, gamma, lam)
    plain, shaped = Replay(T, 1, 1, 1), Replay(T, 1, 1, 1)
    for t in range(T):
        row = dict(obs=np.zeros((1, 1)), base_action=np.zeros((1, 1)), action=np.zeros((1, 1)),
                   next_obs=np.zeros((1, 1)), next_base_action=np.zeros((1, 1)), terminated=term[t:t + 1],
                   truncated=np.zeros(1, bool))
        plain.add(reward=r[t:t + 1], **row)
        shaped.add(reward=(r + f)[t:t + 1], **row)
    rows, envs = np.arange(T), np.zeros(T, int)
    a, b = plain.nstep(rows, envs, 3, gamma), shaped.nstep(rows, envs, 3, gamma)
    end = rows + b["steps"]  # the state each target bootstraps from (or the terminal state)
    end_phi = np.where(b["discount"] > 0, phi[end], 1.0)  # a termination's potential is 1
    expected = lam * (gamma ** b["steps"] * end_phi - phi[rows])
    assert np.allclose(b["ret"] - a["ret"], expected, atol=1e-5)


def test_stalling_in_a_state_earns_no_positive_shaping():
    f = potential_shaping(np.full(10, 0.6), np.full(10, 0.6), np.zeros(10, bool), 0.99, 1.0)
    assert (f <= 0).all()


# ---- the model: thresholding, checkpoints, spec mismatch ----------------------------------------------------
def _obs(n, seed=0):
    rng = np.random.default_rng(seed)
    return {"proprio": rng.normal(size=(n, 3)).astype(np.float32), "object": rng.normal(size=(n, 2)).astype(np.float32)}


def test_classifier_fires_exactly_at_or_above_its_threshold():
    torch.manual_seed(0)
    model = RewardModel.build(SPEC, hidden=(16,))
    obs = _obs(50)
    p = model.success_prob(obs)
    model.threshold = float(np.sort(p)[30])
    hit = model.success(obs)
    assert hit.tolist() == (p >= model.threshold).tolist() and hit.sum() == 20
    phi = model.progress(obs)
    assert phi.shape == (50,) and (phi >= 0).all() and (phi <= 1).all()


def test_learned_reward_is_classifier_success_plus_shaping_and_moves_terminations():
    torch.manual_seed(0)
    model = RewardModel.build(SPEC, hidden=(16,))
    obs, nxt = _obs(40, 0), _obs(40, 1)
    model.threshold = float(np.median(model.success_prob(nxt)))
    hit = model.success(nxt)
    env_term = np.zeros(40, bool)
    env_trunc = np.arange(40) % 7 == 0
    wrapper = LearnedReward(model, gamma=0.9, shaping=0.5)
    r, term, trunc = wrapper(obs, nxt, np.zeros(40, bool), env_term, env_trunc)
    phi, phi2 = model.progress(obs), model.progress(nxt)
    expected = hit + 0.5 * (0.9 * np.where(hit, 1.0, phi2) - phi)
    assert np.allclose(r, expected, atol=1e-6)
    assert term.tolist() == hit.tolist()  # the classifier ends the learner's episode
    assert trunc.tolist() == (env_trunc & ~hit).tolist()  # an env end without success is a cut
    # success from the env (sim): its flags are kept, its success flag is r_success
    env_success = np.arange(40) % 5 == 0
    r2, term2, trunc2 = LearnedReward(model, 0.9, 0.0, success="env")(obs, nxt, env_success, env_success, env_trunc)
    assert r2.tolist() == env_success.astype(np.float32).tolist() and term2.tolist() == env_success.tolist()


def test_saved_reward_model_loads_with_identical_outputs(tmp_path):
    torch.manual_seed(0)
    model = RewardModel.build(SPEC, hidden=(16, 8))
    model.threshold = 0.37
    model.save(tmp_path / "run" / "reward_model")
    loaded = load_reward_model(tmp_path / "run")  # the run directory is enough
    obs = _obs(20)
    assert loaded.threshold == 0.37 and loaded.spec == SPEC
    assert np.array_equal(loaded.progress(obs), model.progress(obs))
    assert np.array_equal(loaded.success_prob(obs), model.success_prob(obs))


def test_reward_model_for_another_task_or_obs_spec_is_refused_naming_the_mismatch():
    other = {"proprio": 3, "object": 4}
    with pytest.raises(SpecMismatch, match=r"task: reward model 'lift', env 'push'.*'object': reward model expects "
                                           r"dim 2, env gives 4"):
        SPEC.check("push", other, "env")
    SPEC.check("lift", {"proprio": 3, "object": 2, "extra": 1}, "env")  # extra keys are fine


def test_a_policy_checkpoint_is_not_taken_for_a_reward_model(tmp_path):
    from robot_rl.common import checkpoint

    checkpoint.save(tmp_path / "policy", {"w": torch.zeros(1)}, {"kind": "diffusion", "spec": {}})
    with pytest.raises(CheckpointError, match="'diffusion' checkpoint, not a reward model"):
        load_reward_model(tmp_path / "policy")


def test_residual_rl_is_warned_when_the_reward_model_saw_no_rollouts_of_its_base():
    from robot_rl import sim
    from robot_rl.reward.model import rollout_mismatch
    from robot_rl.policies.residual import ResidualConfig, ResidualPolicy

    env = sim.make("lift", num_envs=1)
    try:
        torch.manual_seed(0)
        base = ResidualPolicy.build(None, ResidualConfig(hidden=(8,)), env=env)
        other = ResidualPolicy.build(None, ResidualConfig(hidden=(8,)), env=env)  # other weights
    finally:
        env.close()
    sha = base.weights_sha256()
    assert sha != other.weights_sha256() and len(sha) == 64
    model = RewardModel.build(SPEC, hidden=(8,))
    assert rollout_mismatch(model, sha) is None  # a model from before the list was kept: nothing to tell
    model.info = {"rollout_policies": [{"policy": "old/bc", "sha256": None, "episodes": 50, "failed": 40}]}
    assert rollout_mismatch(model, sha) is None  # stores from before the hash was recorded: cannot tell
    model.info["rollout_policies"].append({"policy": "runs/bc/policy", "sha256": other.weights_sha256(),
                                           "episodes": 200, "failed": 150})
    msg = rollout_mismatch(model, sha, "runs/weak/policy")
    assert "runs/bc/policy (200 episodes)" in msg and "(runs/weak/policy)" in msg
    assert "robot-rl-collect task=lift policy=runs/weak/policy episodes=200 out=ROLLOUTS" in msg
    assert "rollouts=ROLLOUTS" in msg
    assert rollout_mismatch(model, None, "runs/weak/policy") is None  # a base without a weights hash: cannot tell
    model.info["rollout_policies"].append({"policy": "copy", "sha256": sha, "episodes": 9,
                                           "failed": 9})
    assert rollout_mismatch(model, sha, "runs/weak/policy") is None


def test_reward_training_lr_decays_by_cosine_to_zero_over_its_steps(monkeypatch):
    from robot_rl.reward.train import RewardTrainConfig, _fit

    lrs, step = [], torch.optim.AdamW.step

    def recording_step(self, *args, **kwargs):
        lrs.append(self.param_groups[0]["lr"])
        return step(self, *args, **kwargs)

    class Log:
        def scalar(self, *args):
            pass

    monkeypatch.setattr(torch.optim.AdamW, "step", recording_step)
    torch.manual_seed(0)
    net, n = RewardModel.build(SPEC, hidden=(8,)).progress_net, 20
    cfg = RewardTrainConfig(steps=7, batch_size=8, lr=1e-3)
    _fit(net, _obs(n), np.arange(n), np.zeros(n, np.float32), np.ones(n), cfg, np.random.default_rng(0), Log(), "p")
    # the schedule it had before diffusers' get_cosine_schedule_with_warmup (no warm-up) replaced it, step for step
    assert lrs == [1e-3 * 0.5 * (1 + np.cos(np.pi * min(1.0, s / 7))) for s in range(7)]
