"""The intervention protocol: executed actions and flags, per-episode bookkeeping, routing into the
recorder / episode store and the replay, the scripted human's trigger and budget, a device lost
mid-episode, and rewind."""

from __future__ import annotations

from robot_rl.common.config import from_mapping
import numpy as np
import pytest

from robot_rl import sim
from robot_rl.data import EpisodeStore
from robot_rl.data.recorder import EpisodeRecorder
from robot_rl.hil import (
    DeviceDisconnected, DeviceSupervisor, InterventionController, ScriptedHuman, ScriptedHumanConfig, summary,
)
from robot_rl.hil.intervention import Decision, no_events
from robot_rl.hil.keyboard import KeyboardDevice
from robot_rl.hil.rewind import Rewinder
from robot_rl.hil.session import run_session
from tests.test_hil_devices import Script


class Fixed:
    """A supervisor taking env i at step t when plan[t][i]; its action is all 0.5."""

    def __init__(self, plan, action_dim):
        self.plan, self.t, self.action_dim, self.resets = plan, 0, action_dim, []

    def reset(self, ids):
        self.resets.append(list(ids))

    def decide(self, obs, policy_action, human):
        take = np.asarray(self.plan[self.t], bool)
        self.t += 1
        n = len(take)
        return Decision(take, np.full((n, self.action_dim), 0.5, np.float32), no_events(n), np.zeros(n, bool))


def test_controller_executes_human_actions_only_where_flagged_and_counts_per_episode():
    plan = [[0, 1], [1, 1], [0, 0], [1, 0]]
    hil = InterventionController(2, Fixed(plan, 3))
    pol = -np.ones((2, 3), np.float32)
    flags = []
    for t in range(4):
        action, human = hil.act({}, pol)
        flags.append(human.tolist())
        assert np.all(action[human] == 0.5) and np.all(action[~human] == -1)
        if t == 2:
            done = hil.end_episodes([False, True])
            assert [(e.env, e.steps, e.intervention_steps, e.takeovers) for e in done] == [(1, 3, 2, 1)]
    assert flags == [[False, True], [True, True], [False, False], [True, False]]
    (e0,) = hil.end_episodes([True, False])
    assert (e0.steps, e0.intervention_steps, e0.takeovers, e0.rate) == (4, 2, 2, 0.5)
    s = summary(hil.pop_finished())
    assert s["hil/intervention_rate"] == pytest.approx((2 / 3 + 0.5) / 2) and s["hil/intervention_steps"] == 4
    assert hil.fraction == pytest.approx(4 / 8)


def test_flags_route_into_the_episode_store_mask_and_the_replay():
    from robot_rl.rl.replay import Replay

    env = sim.make("lift", num_envs=2, task_config={"episode_steps": 6})
    plan = [[t % 3 == 0, t >= 4] for t in range(12)]
    hil = InterventionController(2, Fixed(plan, env.action_dim))
    rec, replay = EpisodeRecorder(2), Replay(64, 2, 3, env.action_dim)
    obs = env.reset(0)
    eps = {}
    for t in range(12):
        action, human = hil.act(obs, np.zeros((2, env.action_dim), np.float32))
        nxt, r, done, info = env.step(action)
        info["intervention"] = human
        z = np.zeros((2, 3), np.float32)
        replay.add(obs=z, base_action=action * 0, action=action, reward=r, next_obs=z, next_base_action=action * 0,
                   terminated=info["terminated"], truncated=info["truncated"], intervention=human)
        for i, steps in rec.add(obs, action, r, done, info).items():
            eps.setdefault(i, []).append(steps)
        hil.end_episodes(done)
        obs = nxt
    env.close()
    assert np.array_equal(replay.data["intervention"][:12], np.array(plan))
    assert np.all(replay.data["action"][:12][np.array(plan)] == 0.5)
    assert eps[0][0]["intervention"].tolist() == [t % 3 == 0 for t in range(6)]
    assert eps[1][1]["intervention"].tolist() == [True] * 6
    stats = hil.pop_finished()
    assert sorted((e.env, e.intervention_steps) for e in stats) == [(0, 2), (0, 2), (1, 2), (1, 6)]


def _run(env, policy, human, steps, seed=0):
    hil = InterventionController(env.num_envs, human)
    obs = env.reset(seed)
    succ = []
    for _ in range(steps):
        action, _ = hil.act(obs, policy(obs))
        obs, _, done, info = env.step(action)
        succ += info["success"][done].tolist()
        hil.end_episodes(done)
    return hil, succ


def test_scripted_human_corrects_a_stuck_policy_within_its_budget_and_leaves_the_expert_alone():
    from robot_rl.sim.experts import make_expert

    env = sim.make("lift", num_envs=4)
    stuck = lambda obs: np.tile(env.action_space.neutral, (4, 1))  # noqa: E731  holds still, gripper open
    cfg = ScriptedHumanConfig(threshold=0.5, patience=3, hold=10, cooldown=2, max_fraction=0.3)
    hil, succ = _run(env, stuck, ScriptedHuman(env, cfg), 160)
    eps = hil.pop_finished()
    assert 0.2 < hil.fraction <= 0.3  # it intervenes, never past the budget
    assert all(e.takeovers >= 1 for e in eps)
    expert = make_expert(env)
    hil2, succ2 = _run(env, expert.act, ScriptedHuman(env, cfg), 60)
    assert hil2.total_intervention_steps == 0 and succ2 and all(succ2)  # on plan: never takes over
    env.close()


def test_scripted_human_always_drives_every_step_and_rejects_bad_settings():
    env = sim.make("lift", num_envs=2)
    always = ScriptedHuman(env, ScriptedHumanConfig(trigger="always", max_fraction=1.0))
    hil, succ = _run(env, lambda o: np.zeros((2, env.action_dim), np.float32), always, 60)
    assert hil.fraction == 1.0 and succ and all(succ)  # the expert's demos succeed
    with pytest.raises(ValueError, match="hil.trigger='sometimes'"):
        from_mapping(ScriptedHumanConfig, {"trigger": "sometimes"})
    with pytest.raises(ValueError, match=r"unknown hil key\(s\) \['budget'\]"):
        from_mapping(ScriptedHumanConfig, {"budget": 0.1}, "hil")
    env.close()


class ExpertRunner:
    def __init__(self, env):
        from robot_rl.sim.experts import make_expert

        self.expert = make_expert(env)

    def reset(self, ids):
        pass

    def act(self, obs):
        return self.expert.act(obs)


def test_a_device_lost_mid_episode_leaves_the_policy_in_control_flags_the_episode_and_loses_nothing(tmp_path):
    env = sim.make("lift", num_envs=1)
    # take over at poll 3, move down for a few polls, then the device dies at poll 8
    batches = [[], [], [("t", "down"), ("t", "up"), ("f", "down")], [], [], [], [],
               DeviceDisconnected("keyboard: unplugged")]
    dev = KeyboardDevice(Script(batches), speed=1.0)
    hil = InterventionController(1, DeviceSupervisor(dev, 1, env.action_dim, False))
    with EpisodeStore.open(tmp_path / "s.zarr", mode="a") as store:
        res = run_session(env, hil, store, episodes=2, seed=3, policy=ExpertRunner(env))
    env.close()
    r = EpisodeStore.open(tmp_path / "s.zarr")
    assert res["episodes"] == 2 and r.n_episodes == 2 and res["stopped"] is None
    e0, e1 = r.episode(0), r.episode(1)
    assert e0.steps["intervention"].tolist()[:8] == [False, False, True, True, True, True, True, False]
    assert not e0.steps["intervention"][7:].any()  # the policy drove from the disconnect on ...
    assert e0.success and e0.source == "intervention"  # ... to the end, and the episode is complete
    assert e0.metadata["end"] == "env" and e0.length < env.episode_steps
    assert np.allclose(e0.steps["action"][2:7, 2], -1.0)  # the human's "f" (down) steps were executed
    assert e0.metadata["device_lost"] and e1.metadata["device_lost"] and e0.metadata["intervention_steps"] == 5
    assert e1.source == "policy" and not e1.steps["intervention"].any()


def test_teleop_without_a_policy_stops_when_the_device_is_lost_keeping_the_partial_episode(tmp_path):
    env = sim.make("lift", num_envs=1)
    dev = KeyboardDevice(Script([[("r", "down")], [], [], DeviceDisconnected("keyboard: gone")]))
    hil = InterventionController(1, DeviceSupervisor(dev, 1, env.action_dim, False, teleop=True))
    with EpisodeStore.open(tmp_path / "s.zarr", mode="a") as store:
        res = run_session(env, hil, store, episodes=3, seed=0)
    env.close()
    ep = EpisodeStore.open(tmp_path / "s.zarr").episode(0)
    assert res["stopped"] == "device_lost" and res["episodes"] == 1
    assert ep.source == "teleop" and ep.length == 4 and ep.metadata["end"] == "device_lost"
    assert ep.steps["intervention"].tolist() == [True, True, True, False] and ep.steps["truncated"][-1]


def test_rewinder_restores_the_exact_earlier_state():
    env = sim.make("lift", num_envs=1, randomization={"obs_noise_std": 0.01})
    rw = Rewinder(env, max_steps=5)
    obs = [env.reset(0)]
    for t in range(4):
        rw.push()
        obs.append(env.step(np.array([[0.5, 0.2, -0.3, -1.0]], np.float32))[0])
    back, k = rw.back(3)
    assert k == 3 and all(np.array_equal(back[key], obs[1][key]) for key in back)
    again = env.step(np.array([[0.5, 0.2, -0.3, -1.0]], np.float32))[0]
    assert all(np.allclose(again[key], obs[2][key], atol=1e-6) for key in again)  # same noise, same physics
    env.close()


def test_rewind_then_correct_cuts_the_undone_steps_and_records_the_segment(tmp_path):
    env = sim.make("lift", num_envs=1, task_config={"episode_steps": 30})
    # 6 policy steps, rewind 4 (the human now has control), 3 human steps moving up, success mark
    batches = [[]] * 6 + [[("z", "down"), ("z", "up"), ("r", "down")], [], [], [("g", "down")]]
    dev = KeyboardDevice(Script(batches), speed=1.0)
    hil = InterventionController(1, DeviceSupervisor(dev, 1, env.action_dim, False))
    with EpisodeStore.open(tmp_path / "s.zarr", mode="a") as store:
        run_session(env, hil, store, episodes=1, seed=0, policy=ExpertRunner(env), rewinder=Rewinder(env, 10),
                    rewind_steps=4)
    env.close()
    ep = EpisodeStore.open(tmp_path / "s.zarr").episode(0)
    assert ep.length == 2 + 3  # 6 steps - 4 undone + 3 human steps (the rewind step itself runs nothing)
    assert ep.steps["intervention"].tolist() == [False, False, True, True, True]
    assert np.allclose(ep.steps["action"][2:, 2], 1.0)
    m = ep.metadata
    assert m["rewinds"] == [{"step": 2, "undone": 5, "undone_intervention": 1}] and m["intervention_steps"] == 3
    assert m["human_label"] == "success" and ep.success and m["end"] == "success" and ep.steps["truncated"][-1]


def test_handing_back_makes_the_policy_replan_from_the_current_state(tmp_path):
    class Counting(ExpertRunner):
        resets = 0

        def reset(self, ids):
            self.resets += 1

    env = sim.make("lift", num_envs=1, task_config={"episode_steps": 12})
    tog = [("t", "down"), ("t", "up")]
    dev = KeyboardDevice(Script([[], tog, [], tog, []]))
    hil = InterventionController(1, DeviceSupervisor(dev, 1, env.action_dim, False))
    policy = Counting(env)
    with EpisodeStore.open(tmp_path / "s.zarr", mode="a") as store:
        run_session(env, hil, store, episodes=1, seed=0, policy=policy)
    env.close()
    ep = EpisodeStore.open(tmp_path / "s.zarr").episode(0)
    assert ep.steps["intervention"][:5].tolist() == [False, True, True, False, False]
    assert policy.resets == 2  # the episode start, and the hand-back at step 3
