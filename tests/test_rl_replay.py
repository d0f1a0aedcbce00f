"""Replay for residual RL: n-step targets at episode ends (termination vs truncation), the ring, demo relabeling."""

from __future__ import annotations

import numpy as np
import pytest

from robot_rl.policies.base import BasePolicy, PolicySpec
from robot_rl.rl.replay import Replay, demo_replay, sample_mixed

GAMMA = 0.5


def _trajectory() -> Replay:
    """Two envs, six vector steps. Env 0 terminates at row 2 (new episode from row 3); env 1 is truncated
    (time limit) at row 1. Rewards: env 0 = 1..6, env 1 = 10..60; next_obs of (row t, env e) = 100 e + t."""
    replay = Replay(capacity=12, num_envs=2, obs_dim=1, action_dim=1)
    for t in range(6):
        marker = np.array([[t], [100 + t]], np.float32)
        replay.add(obs=marker - 0.5, base_action=marker * 0, action=marker * 0,
                   reward=np.array([t + 1, 10 * (t + 1)], np.float32), next_obs=marker,
                   next_base_action=marker + 0.25, terminated=np.array([t == 2, False]),
                   truncated=np.array([False, t == 1]))
    return replay


@pytest.mark.parametrize(
    "row, env, ret, discount, next_marker",
    [
        (0, 0, 1 + 0.5 * 2 + 0.25 * 3, 0.0, 2),  # episode terminates at row 2: no bootstrap
        (1, 0, 2 + 0.5 * 3, 0.0, 2),
        (2, 0, 3, 0.0, 2),
        (3, 0, 4 + 0.5 * 5 + 0.25 * 6, 0.125, 5),  # full 3 steps: gamma^3
        (4, 0, 5 + 0.5 * 6, 0.25, 5),  # row 5 is the newest: cut there, bootstrap from its next_obs
        (0, 1, 10 + 0.5 * 20, 0.25, 101),  # truncated at row 1: bootstraps from the final observation
        (1, 1, 20, 0.5, 101),
        (2, 1, 30 + 0.5 * 40 + 0.25 * 50, 0.125, 104),  # the next episode does not leak into the previous one
    ],
)
def test_nstep_targets_stop_at_episode_ends_and_bootstrap_only_after_truncation(row, env, ret, discount, next_marker):
    out = _trajectory().nstep(np.array([row]), np.array([env]), n=3, gamma=GAMMA)
    assert out["ret"][0] == pytest.approx(ret)
    assert out["discount"][0] == pytest.approx(discount)
    assert out["next_obs"][0, 0] == next_marker
    assert out["next_base_action"][0, 0] == next_marker + 0.25
    assert out["obs"][0, 0] == 100 * env + row - 0.5


def test_one_step_targets_are_reward_and_gamma_unless_terminated():
    out = _trajectory().nstep(np.arange(6), np.zeros(6, np.int64), n=1, gamma=GAMMA)
    np.testing.assert_allclose(out["ret"], [1, 2, 3, 4, 5, 6])
    np.testing.assert_allclose(out["discount"], [0.5, 0.5, 0.0, 0.5, 0.5, 0.5])


def test_ring_overwrites_the_oldest_rows_and_walks_across_the_wrap():
    replay = Replay(capacity=4, num_envs=1, obs_dim=1, action_dim=1)
    for t in range(6):  # rows 0, 1 are overwritten by 4, 5
        v = np.array([[t]], np.float32)
        replay.add(obs=v, base_action=v, action=v, reward=np.array([t], np.float32), next_obs=v + 1,
                   next_base_action=v, terminated=np.array([False]), truncated=np.array([False]))
    assert replay.oldest == 2 and len(replay) == 4
    with pytest.raises(IndexError):
        replay.nstep(np.array([1]), np.array([0]), 3, GAMMA)
    out = replay.nstep(np.array([3]), np.array([0]), 3, GAMMA)  # rows 3, 4, 5 sit in slots 3, 0, 1
    assert out["ret"][0] == pytest.approx(3 + 0.5 * 4 + 0.25 * 5)
    assert out["next_obs"][0, 0] == 6
    rows = replay.sample(500, 3, GAMMA, np.random.default_rng(0))["obs"][:, 0]
    assert set(rows.tolist()) == {2.0, 3.0, 4.0, 5.0}


def test_a_cut_stops_nstep_walks_where_the_envs_were_restarted():
    replay = _trajectory()
    replay.mark_cut()  # e.g. evaluation reset the envs after row 5
    v = np.full((2, 1), 9.0, np.float32)
    replay.add(obs=v, base_action=v, action=v, reward=np.array([100.0, 100.0], np.float32), next_obs=v,
               next_base_action=v, terminated=np.array([False, False]), truncated=np.array([False, False]))
    out = replay.nstep(np.array([4, 5]), np.array([1, 1]), 3, GAMMA)
    np.testing.assert_allclose(out["ret"], [50 + 0.5 * 60, 60])  # the reward after the cut is not included
    np.testing.assert_allclose(out["discount"], [0.25, 0.5])


def test_replay_state_round_trip_restores_samples():
    replay = _trajectory()
    copy = Replay(capacity=12, num_envs=2, obs_dim=1, action_dim=1)
    copy.load_state(replay.state())
    a = replay.sample(64, 3, GAMMA, np.random.default_rng(1))
    b = copy.sample(64, 3, GAMMA, np.random.default_rng(1))
    for k in a:
        np.testing.assert_array_equal(a[k], b[k])


def test_rows_after_a_claim_are_never_sampled_and_a_replay_of_nothing_else_is_refused():
    replay = _trajectory()
    replay.data["after_claim"][1:, 0] = True  # env 0 after its first row, as after a classifier's claim
    b = replay.sample(512, 3, GAMMA, np.random.default_rng(0))
    starts = b["obs"][:, 0] + 0.5  # obs = marker - 0.5: the starting row's marker (env 0: t, env 1: 100 + t)
    assert set(np.unique(starts[starts < 100])) == {0.0}  # env 0: its first row only
    assert set(np.unique(starts[starts >= 100])) == {100.0 + t for t in range(6)}  # env 1: every row
    replay.data["after_claim"][:] = True
    with pytest.raises(ValueError, match="every kept replay row follows a classifier claim"):
        replay.sample(8, 3, GAMMA, np.random.default_rng(0))
    state = replay.state()
    del state["after_claim"]  # saved before the field existed: every row is sampled
    old = Replay(capacity=12, num_envs=2, obs_dim=1, action_dim=1)
    old.load_state(state)
    assert not old.data["after_claim"].any()


def test_potential_is_the_first_steps_and_nan_where_unknown_or_saved_before_it_existed():
    replay = Replay(capacity=8, num_envs=1, obs_dim=1, action_dim=1)
    z = np.zeros((1, 1), np.float32)
    for t in range(4):
        extra = {"potential": np.array([t / 10], np.float32)} if t < 3 else {}
        replay.add(obs=z, base_action=z, action=z, reward=np.zeros(1), next_obs=z, next_base_action=z,
                   terminated=np.zeros(1, bool), truncated=np.zeros(1, bool), **extra)
    out = replay.nstep(np.arange(4), np.zeros(4, int), 3, GAMMA)
    np.testing.assert_allclose(out["potential"][:3], [0.0, 0.1, 0.2])
    assert np.isnan(out["potential"][3])
    old = {k: v for k, v in replay.state().items() if k != "potential"}  # a checkpoint from before the field
    copy = Replay(capacity=8, num_envs=1, obs_dim=1, action_dim=1)
    copy.load_state(old)
    assert np.isnan(copy.nstep(np.arange(4), np.zeros(4, int), 3, GAMMA)["potential"]).all()


class FirstObsChunks(BasePolicy):
    """A deterministic chunked base: its chunk is a function of the observation history (for relabel checks)."""

    def __init__(self, obs_dims, action_dim=2, obs_horizon=2, action_horizon=3):
        self.spec = PolicySpec(task="lift", obs_dims=obs_dims, action_dim=action_dim, obs_horizon=obs_horizon,
                               action_horizon=action_horizon)

    def act(self, obs_history):
        x = np.concatenate([obs_history[k].reshape(len(obs_history[k]), -1) for k in sorted(obs_history)], axis=1)
        first = np.tanh(x.sum(1, keepdims=True) * np.array([[0.1, -0.2]]))  # [B, 2]
        return np.repeat(first[:, None], self.spec.action_horizon, axis=1).astype(np.float32)


def _store(tmp_path):
    from robot_rl.data import Episode, EpisodeStore

    rng = np.random.default_rng(0)
    store = EpisodeStore.open(tmp_path / "demos.zarr", "a")
    eps = []
    for length, success in ((5, True), (4, False)):
        steps = {
            "obs/a": rng.normal(size=(length, 3)).astype(np.float32),
            "obs/b": rng.normal(size=(length, 1)).astype(np.float32),
            "action": rng.uniform(-1, 1, (length, 2)).astype(np.float32),
            "reward": rng.random(length).astype(np.float32),
            "success": np.arange(length) == length - 1 if success else np.zeros(length, bool),
            "terminated": np.arange(length) == length - 1 if success else np.zeros(length, bool),
            "intervention": np.zeros(length, bool),
        }
        eps.append(Episode(steps=steps, task="lift", source="expert", success=success))
    store.append(eps)
    store.close()
    return EpisodeStore.open(tmp_path / "demos.zarr")


def test_demo_states_are_relabeled_with_the_base_action_and_unsuccessful_tails_become_truncations(tmp_path):
    store = _store(tmp_path)
    base = FirstObsChunks({"a": 3, "b": 1})
    demos = demo_replay(store, base, ("a", "b"), reward="success")
    a, b, act = store.read("obs/a"), store.read("obs/b"), store.read("action")
    # episode 0: steps 0-4 (terminates with success); episode 1: steps 5-8, last step dropped
    kept = [0, 1, 2, 3, 4, 5, 6, 7]
    assert demos.written == len(kept) and demos.num_envs == 1
    d = {k: v[: demos.written, 0] for k, v in demos.data.items()}

    def history(t, start):  # the base's 2-observation window at step t, edge-padded at the episode start
        rows = [max(t - 1, start), t]
        return {"a": a[rows][None], "b": b[rows][None]}

    for i, t in enumerate(kept):
        start = 0 if t < 5 else 5
        np.testing.assert_allclose(d["base_action"][i], base.act(history(t, start))[0, 0], rtol=1e-6)
        np.testing.assert_array_equal(d["obs"][i], np.concatenate([a[t], b[t]]))
        np.testing.assert_array_equal(d["action"][i], act[t])
    np.testing.assert_array_equal(d["reward"], [0, 0, 0, 0, 1, 0, 0, 0])
    np.testing.assert_array_equal(d["terminated"], [0, 0, 0, 0, 1, 0, 0, 0])
    np.testing.assert_array_equal(d["truncated"], [0, 0, 0, 0, 0, 0, 0, 1])  # step 7 bootstraps from step 8
    np.testing.assert_array_equal(d["next_obs"][7], np.concatenate([a[8], b[8]]))
    np.testing.assert_allclose(d["next_base_action"][7], base.act(history(8, 5))[0, 0], rtol=1e-6)
    np.testing.assert_array_equal(d["next_base_action"][:3], d["base_action"][1:4])
    # n-step walks stay inside their demo episode
    out = demos.nstep(np.array([3, 6]), np.array([0, 0]), n=3, gamma=GAMMA)
    np.testing.assert_allclose(out["ret"], [0 + 0.5 * 1, 0 + 0.5 * 0])
    np.testing.assert_allclose(out["discount"], [0.0, 0.25])


def test_demo_relabeling_without_a_base_gives_zero_base_actions(tmp_path):
    demos = demo_replay(_store(tmp_path), None, ("a", "b"))
    assert not demos.data["base_action"].any() and not demos.data["next_base_action"].any()


def test_mixed_batches_take_the_demo_fraction_from_demos():
    online, demos = _trajectory(), _trajectory()
    demos.data["obs"][:] = -7.0
    batch = sample_mixed(online, demos, 256, 0.25, 3, GAMMA, np.random.default_rng(0))
    assert len(batch["obs"]) == 256 and int((batch["obs"][:, 0] == -7.0).sum()) == 64
    only_online = sample_mixed(online, None, 256, 0.5, 3, GAMMA, np.random.default_rng(0))
    assert not (only_online["obs"][:, 0] == -7.0).any()
