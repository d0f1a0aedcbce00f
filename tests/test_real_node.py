"""The control node over real DDS: safety wiring end to end, take-over, observations, blending, the tick clock.

The node and the simulated robot (real/sim_driver.py) run in threads of the test process as separate DDS
participants on loopback, in a DDS domain and topic namespace of their own; the test talks to them over DDS
like an operator would (e-stop, reset, teleop) and listens to the node's commands and status.
"""

from __future__ import annotations

import dataclasses
import json
import random
import sys
import threading
import time
import uuid

import numpy as np
import pytest

from robot_rl.real import messages as M
from robot_rl.real.blending import ChunkBlender
from robot_rl.real.config import Blending
from robot_rl.real.qos import ESTOP, LATEST, RELIABLE
from robot_rl.real.tick_clock import TickClock
from tests.test_real_config import deploy_cfg, lift_env


def topic_overrides(ns: str) -> list[str]:
    names = ("joint_states", "position_commands", "trajectory_commands", "estop", "reset", "teleop", "object_pose",
             "episode", "status")
    return [f"deploy.topics.{n}=/{ns}/{n}" for n in names]


def saved_base_and_residual(tmp_path):
    """(base dir, residual dir): a small diffusion base for lift and a residual on it whose actor is perturbed away
    from zero (so it changes the base's actions), both saved as checkpoints."""
    from robot_rl.policies.residual import ResidualConfig, ResidualPolicy
    from tests.test_rl_residual import _diffusion, _perturb

    env = lift_env()
    base = _diffusion(env)
    env.close()
    trained = ResidualPolicy.build(base, ResidualConfig(scale=0.3, hidden=(32, 32)))
    _perturb(trained.actor)
    return base.save(tmp_path / "base"), trained.save(tmp_path / "residual")


class Rig:
    """Sim driver + control node (threads) + an operator participant, on a private DDS domain and namespace."""

    def __init__(self, tmp_path, policy: str = "expert", record: bool = False, extra: tuple = (), residual=None,
                 on_chunk=None, env: dict | None = None, prestart=None):
        """env: overrides of both lift envs (e.g. control_hz); prestart(rig): runs once the operator's publishers exist,
        before the node does (default: the e-stop button publishes its released state, as a button bridge does)."""
        from robot_rl.real.inference import InferenceWorker
        from robot_rl.real.node import ControlNode, bag_topics
        from robot_rl.real.recording import DeploymentRecorder
        from robot_rl.real.sim_driver import SimDriver
        from robot_rl.real.transport_dds import DdsTransport

        self.ns = "t" + uuid.uuid4().hex[:10]
        domain = random.randint(1, 99)
        _, self.cfg = deploy_cfg(
            f"deploy.domain_id={domain}", "deploy.realtime_priority=0", "deploy.inference.realtime_priority=0",
            "deploy.inference.worker=thread", "deploy.watchdog.hold_after_s=0.1", "deploy.watchdog.stop_after_s=0.5",
            *topic_overrides(self.ns), *extra,
        )
        self.switch = sys.getswitchinterval()
        self.env_node, self.env_driver = lift_env(**(env or {})), lift_env(**(env or {}))
        self.t_node = DdsTransport(domain, loopback=True)
        self.t_driver = DdsTransport(domain, loopback=True)
        self.t_op = DdsTransport(domain, loopback=True)
        t = self.cfg.topics
        self.status_sub = self.t_op.subscribe(t.status, M.String, LATEST)
        self.cmd_sub = self.t_op.subscribe(t.position_commands, M.Float64MultiArray, RELIABLE)
        self.estop = self.t_op.publisher(t.estop, M.Bool, ESTOP)
        self.reset = self.t_op.publisher(t.reset, M.String, RELIABLE)
        self.states = self.t_op.publisher(t.joint_states, M.JointState, RELIABLE)
        if prestart is not None:
            prestart(self)
        else:
            self.estop.publish(M.Bool(data=False))
        self.driver = SimDriver(self.env_driver, self.cfg, self.t_driver, episodes=1000, wait_for_node_s=60, log=lambda m: None)
        self.worker = InferenceWorker(policy, dataclasses.asdict(self.env_node.cfg), mode="thread")
        if on_chunk is not None:  # the test sees every chunk the node receives, in arrival order
            poll = self.worker.poll

            # In the node's thread: each chunk as it arrives with the first step that may take it: the pending step
            # (its action late: a late update), else the step the planner plans next (the current one when it is
            # not planned yet: the episode's first, or a poll between a step's last tick and the next step's first).
            def logged_poll():
                out = poll()
                for r in out:
                    if r[0] == "chunk":
                        pl = self.node.planner
                        first = pl.pending_step if pl.pending else \
                            pl.step if pl.step_obs is None or pl.tick_in_step == 0 else pl.step + 1
                        on_chunk(r, first)
                return out

            self.worker.poll = logged_poll
        self.recorder = None
        if record:
            self.store = tmp_path / "deploy.zarr"
            self.recorder = DeploymentRecorder(
                store=self.store, bag=None, bag_topics=bag_topics(self.cfg), task="lift", instruction="lift the red cube",
                obs_dims={k: (v,) for k, v in self.worker.spec.obs_dims.items()}, action_dim=self.worker.spec.action_dim,
                policy_name=policy,
            )
        self.logs: list[str] = []  # what the node logged
        self.node = ControlNode(self.cfg, self.env_node, self.worker, self.t_node, recorder=self.recorder,
                                residual=residual, policy_name=policy, log=self.logs.append)
        self.statuses: list[dict] = []
        self.commands: list[tuple[float, np.ndarray]] = []
        self.errors: list[BaseException] = []
        self.threads = [threading.Thread(target=self._guard, args=(f,), daemon=True) for f in (self.driver.run, self.node.run)]
        for th in self.threads:
            th.start()

    def reset_node(self, token: str | None = None) -> None:
        """Publish a reset with the node's token (or `token`)."""
        self.reset.publish(M.String(data=self.node.reset_token if token is None else token))

    def _guard(self, fn):
        try:
            fn()
        except BaseException as e:  # noqa: BLE001 - surfaced by the test
            self.errors.append(e)

    def poll(self) -> None:
        self.t_op.wait(0.01)
        for m, t in self.status_sub.take():
            self.statuses.append(json.loads(m.data))
        for m, t in self.cmd_sub.take():
            self.commands.append((t, np.asarray(m.data)))
        assert not self.errors, self.errors

    def wait_for(self, pred, timeout: float = 30.0, what: str = ""):
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            self.poll()
            if self.statuses and pred(self.statuses[-1]):
                return self.statuses[-1]
        raise AssertionError(f"timed out waiting for {what}; last status {self.statuses[-1:]}")

    def close(self) -> None:
        self.node.stopping = True
        self.driver.stopping = True
        for th in self.threads:
            th.join(timeout=20)
        if self.recorder is not None:
            self.recorder.close()
        self.worker.close()
        for t in (self.t_op, self.t_driver, self.t_node):
            t.close()
        self.env_node.close()
        self.env_driver.close()
        sys.setswitchinterval(self.switch)


@pytest.fixture()
def rig_factory(tmp_path):
    rigs = []

    def make(**kw):
        rigs.append(Rig(tmp_path, **kw))
        return rigs[-1]

    yield make
    for r in rigs:
        r.close()


def running(s):
    return s["mode"] == "running"


def test_estop_topic_latches_a_stop_that_only_a_reset_with_the_token_after_release_clears(rig_factory):
    rig = rig_factory()
    rig.wait_for(running, what="the node to run an episode")
    rig.estop.publish(M.Bool(data=True))
    s = rig.wait_for(lambda s: s["mode"] == "stopped", what="the e-stop to latch")
    assert s["stop_reason"] == "e-stop"
    n_stopped = len(rig.commands)
    end = time.monotonic() + 0.3
    while time.monotonic() < end:
        rig.poll()
    assert len(rig.commands) - n_stopped <= 1  # at most the final hold, then silence while stopped
    rig.reset_node()  # refused: the e-stop is still asserted
    rig.wait_for(lambda s: s["counts"].get("refused_resets", 0) >= 1, what="the refused reset")
    assert rig.statuses[-1]["mode"] == "stopped"
    rig.estop.publish(M.Bool(data=False))
    end = time.monotonic() + 0.3
    while time.monotonic() < end:
        rig.poll()
    assert rig.statuses[-1]["mode"] == "stopped"  # releasing the button alone clears nothing
    for token in ("", "0" * 32, rig.node.reset_token[:-1]):  # anyone else on the DDS domain
        rig.reset_node(token)
    s = rig.wait_for(lambda s: s["safety"].get("rejected_reset_token", 0) == 3, what="three resets without the token")
    assert s["mode"] == "stopped"
    rig.reset_node()
    rig.wait_for(running, what="the node to resume after the reset")
    assert rig.statuses[-1]["safety"]["resets"] == 1


def test_stale_joint_states_hold_position_then_stop(rig_factory):
    rig = rig_factory()
    rig.wait_for(running, what="the node to run an episode")
    rig.driver.stopping = True  # the robot's joint states stop arriving
    rig.wait_for(lambda s: s["mode"] == "stopped", what="the watchdog stop")
    modes = [s["mode"] for s in rig.statuses]
    assert "holding" in modes[modes.index("running"):]
    assert "stale" in rig.statuses[-1]["stop_reason"]
    assert rig.statuses[-1]["safety"]["stale_hold_ticks"] >= 1
    # while holding, every command repeated the last one
    holding_cmds = [c for _, c in rig.commands[-4:-1]]
    for c in holding_cmds[1:]:
        np.testing.assert_array_equal(c, holding_cmds[0])


def test_malformed_joint_states_are_rejected_counted_and_never_commanded(rig_factory):
    rig = rig_factory()
    rig.wait_for(running, what="the node to run an episode")
    names = list(rig.cfg.joints)
    q = [0.0] * len(names)
    bad = [
        M.JointState(name=names[:-1] + ["wrist_extra"], position=q, velocity=q),
        M.JointState(name=names, position=q[:-2], velocity=q),
        M.JointState(name=names, position=[np.nan] + q[1:], velocity=q),
        M.JointState(name=names, position=[np.inf] * len(q), velocity=q),
    ]
    for _ in range(5):
        for m in bad:  # one at a time: the node reads joint states best effort, keep-last 5, like sensor data
            rig.states.publish(m)
            rig.poll()
    s = rig.wait_for(lambda s: sum(v for k, v in s["safety"].items() if k.startswith("rejected_joint_state")) >= 20,
                     what="the malformed joint states to be counted")
    assert s["safety"]["rejected_joint_state_names"] == 5
    assert s["safety"]["rejected_joint_state_count"] == 5
    assert s["safety"]["rejected_joint_state_nonfinite"] == 10
    assert s["mode"] == "running"
    lo = np.array([rig.cfg.limits[j].lower for j in names])
    hi = np.array([rig.cfg.limits[j].upper for j in names])
    for _, c in rig.commands:
        assert np.all(np.isfinite(c)) and np.all(c >= lo) and np.all(c <= hi)


class RaisingPolicy:
    """The scripted expert, until its fifth chunk: then it raises, as a crashing model would."""

    def __new__(cls, env):
        from robot_rl.policies.expert import ExpertPolicy

        class _Raising(ExpertPolicy):
            calls = 0

            def act(self, obs_history):
                type(self).calls += 1
                if type(self).calls >= 5:
                    raise RuntimeError("CUDA error: device-side assert triggered")
                return super().act(obs_history)

        return _Raising(env)


def test_policy_exception_latches_a_safe_stop(rig_factory):
    rig = rig_factory(policy="tests.test_real_node:RaisingPolicy")
    s = rig.wait_for(lambda s: s["mode"] == "stopped", what="the policy fault to stop the node")
    assert s["stop_reason"].startswith("policy raised: RuntimeError: CUDA error")
    n = len(rig.commands)
    end = time.monotonic() + 0.3
    while time.monotonic() < end:
        rig.poll()
    assert len(rig.commands) - n <= 1


class SlowFirstChunkPolicy:
    """The scripted expert whose first chunk of an episode takes 0.4 s (a cold model, a loaded machine)."""

    def __new__(cls, env):
        from robot_rl.policies.expert import ExpertPolicy

        class _Slow(ExpertPolicy):
            fresh = True

            def reset(self, env_ids=None):
                self.fresh = True
                super().reset(env_ids)

            def act(self, obs_history):
                if self.fresh:
                    self.fresh = False
                    time.sleep(0.4)
                return super().act(obs_history)

        return _Slow(env)


def test_the_robot_starts_an_episode_only_once_its_first_action_is_planned(rig_factory):
    # in sim the first action acts from t = 0; a robot started before it arrives would idle through step 0
    rig = rig_factory(policy="tests.test_real_node:SlowFirstChunkPolicy")
    s = rig.wait_for(lambda s: s["episode"] == 0 and s["mode"] == "running", what="the node to take episode 0")
    assert not s["ready"] and rig.driver.data.time == 0.0  # planning: the simulated robot is still frozen
    rig.wait_for(lambda s: s["ready"] and s["step"] >= 3, what="the episode to run")
    assert rig.driver.data.time > 0.0


def test_teleop_takeover_switches_the_command_source_and_flags_the_recording(rig_factory):
    from robot_rl.data.episode_store import EpisodeStore

    rig = rig_factory(record=True)
    rig.wait_for(running, what="the node to run an episode")
    from robot_rl.real.teleop import TeleopPublisher

    tool = TeleopPublisher(rig.t_op, rig.cfg.topics.teleop)  # what a teleop device bridge uses
    up = [0.0, 0.0, 1.0, 1.0]  # move up with the gripper open: not what the expert does at the start
    end = time.monotonic() + 0.6
    while time.monotonic() < end:
        tool.send(up)
        rig.poll()
    assert any(s["source"] == "teleop" for s in rig.statuses)
    rig.wait_for(lambda s: s["source"] == "policy" and s["counts"].get("episodes", 0) >= 1,
                 what="control back to the policy and an episode finished")
    assert rig.statuses[-1]["counts"]["intervention_steps"] >= 3
    rig.close()
    store = EpisodeStore.open(rig.store)
    assert store.n_episodes >= 1
    flags = store.read("intervention")
    assert flags.sum() >= 3 and not flags.all()
    sources = list(store.episode_attr("source"))
    assert "intervention" in sources
    i = sources.index("intervention")
    a, b = store.episode_range(i)
    act = store.read("action", a, b)[store.read("intervention", a, b)]
    np.testing.assert_allclose(act, np.tile(up, (len(act), 1)))  # the human's action is what was recorded


def test_joint_trajectory_commands_drive_the_robot_through_an_episode(rig_factory):
    rig = rig_factory(extra=("deploy.command_type=joint_trajectory",))
    s = rig.wait_for(lambda s: s["counts"].get("episodes", 0) >= 1, what="an episode on joint_trajectory_controller")
    assert s["counts"]["successes"] >= 1 and s["stop_reason"] is None
    assert rig.driver.counts["commands"] > 0 and rig.driver.counts["rejected_commands"] == 0
    assert rig.commands == []  # nothing went to the position controller's topic


def test_camera_images_are_decoded_and_malformed_ones_rejected(rig_factory, request):
    ns_cam = "c" + uuid.uuid4().hex[:8]
    rig = rig_factory(extra=(f"+deploy.topics.cameras.front=/{ns_cam}/front/image_raw",))
    pub = rig.t_op.publisher(f"/{ns_cam}/front/image_raw", M.Image, RELIABLE)
    img = np.random.default_rng(0).integers(0, 255, (4, 6, 3), dtype=np.uint8)
    end = time.monotonic() + 20
    while "front" not in rig.node.images and time.monotonic() < end:
        pub.publish(M.Image(height=4, width=6, encoding="rgb8", step=18, data=img.tobytes()))
        rig.poll()
    np.testing.assert_array_equal(rig.node.images["front"], img)
    pub.publish(M.Image(height=4, width=6, encoding="bgr8", step=18, data=img.tobytes()))
    pub.publish(M.Image(height=4, width=6, encoding="rgb8", step=18, data=img.tobytes()[:-3]))
    rig.wait_for(lambda s: s["safety"].get("rejected_image_encoding", 0) == 1
                 and s["safety"].get("rejected_image_size", 0) == 1, what="two malformed images rejected")


class ConstantResidual:
    """A residual that always asks for the same correction (built from config like any residual)."""

    def __init__(self, delta, fail_after: int | None = None):
        self.delta, self.fail_after, self.calls = np.asarray(delta, np.float32), fail_after, 0

    def __call__(self, obs, base_action):
        self.calls += 1
        assert set(obs) == {"proprio", "object"} and base_action.shape == (1, 4)
        if self.fail_after is not None and self.calls > self.fail_after:
            raise FloatingPointError("residual diverged")
        return self.delta[None]


def test_residual_is_added_to_every_executed_action_and_recorded(rig_factory):
    from robot_rl.real.residual import load_residual
    from robot_rl.data.episode_store import EpisodeStore

    res = load_residual({"_target_": "tests.test_real_node.ConstantResidual", "delta": [0.0, 0.0, 0.0, -2.0]})
    rig = rig_factory(record=True, residual=res)
    rig.wait_for(lambda s: s["step"] >= 10, what="ten policy steps with the residual")
    rig.close()  # commits the running episode (partial)
    store = EpisodeStore.open(rig.store)
    grip = store.read("action")[:, -1]
    np.testing.assert_array_equal(grip, -1.0)  # base grip in [-1, 1] minus 2, clipped: always closed
    assert res.calls >= len(grip)


def test_residual_exception_latches_a_safe_stop(rig_factory):
    rig = rig_factory(residual=ConstantResidual([0.0] * 4, fail_after=3))
    s = rig.wait_for(lambda s: s["mode"] == "stopped", what="the residual fault to stop the node")
    assert s["stop_reason"] == "residual raised: FloatingPointError: residual diverged"


class ScheduledBase:
    """A one-step-chunk base that replays given base actions, one per act() call (the worker's, step by step)."""

    def __init__(self, spec, actions):
        self.spec, self.actions, self.t = dataclasses.replace(spec, action_horizon=1), actions, 0

    def reset(self, env_ids=None):
        pass

    def act(self, obs_history):
        self.t += 1
        return np.asarray(self.actions[self.t - 1], np.float32)[None, None]


def test_trained_residual_in_the_loop_acts_as_the_in_process_residual_policy(rig_factory, tmp_path):
    """policy=<base> residual=<residual checkpoint>: the base's chunks come from the worker, the residual runs in
    the loop; on the recorded observations each executed action equals what the in-process ResidualPolicy (the
    evaluation path: PolicyRunner, ChunkQueue, compose) computes from the same base actions."""
    from robot_rl.policies import load_policy
    from robot_rl.policies.runner import PolicyRunner
    from robot_rl.real.residual import load_residual
    from robot_rl.data.episode_store import EpisodeStore

    base_dir, res_dir = saved_base_and_residual(tmp_path)
    chunks = []  # (start step, chunk, first step it can serve)

    def arrived(r, first):  # a chunk serves the steps it covers from `first` on
        chunks.append((r[2], r[3], first))

    rig = rig_factory(policy=str(base_dir), record=True, residual=load_residual(str(res_dir)), on_chunk=arrived)
    s = rig.wait_for(lambda s: s["step"] >= 12, what="twelve policy steps with the residual in the loop")
    rig.close()  # commits the running episode (partial)
    assert s["mode"] == "running", s
    store = EpisodeStore.open(rig.store)
    assert store.n_episodes == 1
    obs = {k: store.read(f"obs/{k}") for k in ("proprio", "object")}
    executed = store.read("action")
    # blending "none": each step executes the newest chunk that covers it and had arrived when the step was planned;
    # a step none covers was starved (a machine too busy to run the base in time) and held: it is not compared
    base_actions, held = [], []
    for t in range(len(executed)):
        cover = [c[t - start] for start, c, serves in chunks if start <= t < start + len(c) and serves <= t]
        held.append(not cover)
        base_actions.append(cover[-1] if cover else np.zeros(executed.shape[1], np.float32))
    held = np.array(held)
    assert held.sum() == rig.node.counts.get("starved_steps", 0), "steps without a chunk are the node's starved ones"
    assert (~held).sum() >= 8, f"{held.sum()} of {len(held)} steps starved: too busy a machine to compare"
    policy = load_policy(res_dir)
    policy.base = ScheduledBase(policy.base.spec, base_actions)
    runner = PolicyRunner(policy, 1)
    expected = np.concatenate([runner.act({k: v[t:t + 1] for k, v in obs.items()}) for t in range(len(executed))])
    assert np.abs(expected - np.stack(base_actions))[~held].max() > 0.01  # the residual did something
    np.testing.assert_allclose(executed[~held], expected[~held], rtol=0, atol=1e-5)


def test_residual_checkpoint_on_another_base_is_refused(tmp_path):
    from robot_rl.policies.base import SpecMismatch
    from robot_rl.policies.residual import ResidualConfig, ResidualPolicy
    from robot_rl.real.residual import load_residual
    from tests.test_rl_residual import _diffusion

    env = lift_env()
    base = _diffusion(env)
    env.close()
    res = load_residual(str(ResidualPolicy.build(base, ResidualConfig()).save(tmp_path / "residual")))
    res.check_base(base.spec)
    with pytest.raises(SpecMismatch, match="not the base this residual was trained on"):
        res.check_base(dataclasses.replace(base.spec, action_horizon=1))  # policy=<the residual checkpoint> itself
    with pytest.raises(ValueError, match="is a 'diffusion' checkpoint; it must be a residual one"):
        load_residual(str(base.save(tmp_path / "base")))


# ---- observation, blending, clock (no DDS) --------------------------------------------------------------
def test_observation_from_joint_states_matches_sim():
    from robot_rl.real.observation import ObservationModel

    env = lift_env()
    try:
        obs = env.reset(7)
        _, cfg = deploy_cfg()
        om = ObservationModel(env, cfg.joints)
        qa, da, o = om.qpos_adr, om.dof_adr, env.task.obj_qpos  # the joints' qpos / dof addresses, wire order
        phys = om.phys(env.qpos[0, qa], env.qvel[0, da], env.qpos[0, o : o + 7])
        ours = om.observe(phys, env.target[0])
        assert set(ours) == set(env.obs_dims)
        for k in obs:
            np.testing.assert_allclose(ours[k], obs[k], atol=1e-6)
        np.testing.assert_allclose(om.ee_pos(env.qpos[0, qa]), env.task.field(obs, "proprio", "ee_pos")[0], atol=1e-6)
    finally:
        env.close()


def test_observation_from_joint_states_matches_sim_while_the_arm_moves():
    # the sim's frame sensors describe the same instant as its joint positions, so forward kinematics of a joint
    # state gives the policy exactly the observation it had in sim, also at speed
    from robot_rl.real.observation import ObservationModel

    env = lift_env()
    try:
        env.reset(3)
        _, cfg = deploy_cfg()
        om = ObservationModel(env, cfg.joints)
        qa, da, o = om.qpos_adr, om.dof_adr, env.task.obj_qpos  # the joints' qpos / dof addresses, wire order
        for _ in range(6):  # moving fast: a full-scale step sideways and down
            obs, *_ = env.step(np.array([[1.0, -1.0, -1.0, 1.0]], np.float32))
            assert np.abs(env.qvel[0, da[:7]]).max() > 0.2
            ours = om.observe(om.phys(env.qpos[0, qa], env.qvel[0, da], env.qpos[0, o : o + 7]), env.target[0])
            for k in obs:
                np.testing.assert_allclose(ours[k], obs[k], atol=1e-6, err_msg=k)
    finally:
        env.close()


def test_open_loop_blending_executes_the_newest_chunk_and_requests_ahead():
    b = ChunkBlender(Blending(mode="none", lead_steps=1), action_horizon=4)
    assert b.wants_request(0) and b.action(0) is None
    b.add(np.arange(4)[:, None] * np.ones((4, 2)), start=0, now_step=0)
    assert [b.action(t)[0] for t in range(4)] == [0, 1, 2, 3] and b.action(4) is None
    assert not b.wants_request(1) and b.wants_request(3)
    b.add(10 + np.arange(4)[:, None] * np.ones((4, 2)), start=3, now_step=4)  # arrived a step late
    assert b.action(4)[0] == 11  # its step-3 action is in the past, step 4 is its second


def test_one_late_chunk_does_not_make_later_requests_early():
    b = ChunkBlender(Blending(mode="none", lead_steps=0), action_horizon=4)
    b.add(np.zeros((4, 2)), start=0, now_step=0)
    assert not b.wants_request(3) and b.wants_request(4)  # at the step the queue runs out, from its observation
    b.add(np.ones((4, 2)), start=4, now_step=5)  # inference took longer than a policy step, once
    assert b.action(5)[0] == 1
    assert not b.wants_request(7) and b.wants_request(8)  # still from the fresh observation, not a step early


def test_temporal_ensembling_weights_older_predictions_more():
    b = ChunkBlender(Blending(mode="temporal_ensemble", ensemble_k=0.5), action_horizon=3)
    b.add(np.zeros((3, 1)), start=0, now_step=0)
    b.add(np.ones((3, 1)), start=1, now_step=1)
    w = np.exp(-0.5 * np.arange(2))
    assert b.action(1)[0] == pytest.approx(w[1] / w.sum())
    assert b.action(3)[0] == 1.0 and b.wants_request(2)


def test_crossfade_moves_from_the_old_chunk_to_the_new_one_without_a_jump():
    b = ChunkBlender(Blending(mode="crossfade", crossfade_steps=3, lead_steps=0), action_horizon=8)
    b.add(np.zeros((8, 1)), start=0, now_step=0)
    b.add(np.ones((8, 1)), start=2, now_step=4)  # computed from step 2, arriving during step 4
    seq = [b.action(t)[0] for t in range(4, 10)]
    assert seq[0] == pytest.approx(0.25) and seq[1] == pytest.approx(0.5) and seq[2] == pytest.approx(0.75)
    assert seq[3:] == [1.0, 1.0, 1.0]
    assert np.all(np.diff(seq) >= 0)


def test_phase_lock_moves_ticks_just_after_joint_state_arrivals():
    clock = TickClock(100.0, phase_lock=True, margin_s=0.0005)
    clock.t0 = 0.0
    arrival_phase = 0.0063  # states arrive 6.3 ms into each tick period
    for k in range(400):
        clock.arrival(k * 0.01 + arrival_phase)
        clock.start_tick(clock.deadline)
    assert clock.locked
    assert (clock.deadline % 0.01) == pytest.approx(arrival_phase + 0.0005, abs=1e-4)
    assert clock.missed == 0


def test_overrunning_a_tick_counts_the_ticks_skipped():
    clock = TickClock(100.0)
    clock.t0 = 0.0
    clock.start_tick(0.0)
    clock.start_tick(0.0355)  # due at 0.01: 25.5 ms late, the ticks due at 0.02 and 0.03 are skipped
    assert clock.missed == 2 and clock.deadline == pytest.approx(0.04)


def test_the_node_feeds_the_policy_the_actions_it_commanded_as_the_sim_env_does(rig_factory):
    # env.action_history=2: every observation the node builds carries its last two executed actions (oldest first,
    # neutral at an episode's start), as the sim env's obs["prev_actions"] does
    from robot_rl.data.episode_store import EpisodeStore

    rig = rig_factory(record=True, env={"action_history": 2})
    assert rig.node.obs_model.obs_dims["prev_actions"] == 2 * rig.env_node.action_dim
    rig.wait_for(lambda s: s["step"] >= 12, what="twelve policy steps")
    rig.close()  # commits the running episode (partial)
    store = EpisodeStore.open(rig.store)
    neutral = rig.env_node.action_space.neutral
    for i in range(store.n_episodes):
        a, b = store.episode_range(i)
        act, prev = store.read("action", a, b), store.read("obs/prev_actions", a, b)
        executed = np.concatenate([np.tile(neutral, (2, 1)), np.clip(act, -1, 1)])
        want = np.concatenate([executed[:-2], executed[1:-1]], axis=1)  # at step t: actions t-2, t-1
        assert len(act) >= 3
        np.testing.assert_allclose(prev, want, atol=1e-6)


def test_the_sim_driver_takes_the_randomizations_latency_noise_task_config_and_the_policys_history_from_env_overrides():
    # the dry run hands both commands env_overrides(env_cfg): the driver's robot then has the episode's drawn
    # action latency (the same draw as sim), the observation noise, and the node the policy's action history
    from robot_rl import sim
    from robot_rl.real.sim_driver import SimDriver
    from robot_rl.real.transport_dds import DdsTransport
    from robot_rl.dry_run import env_overrides
    from tests.test_real_config import compose

    want = sim.env_config({"task": "lift", "num_envs": 1, "action_history": 3, "task_config": {"episode_steps": 48},
                           "randomization": {"action_latency": [1, 2], "obs_noise_std": 0.004, "friction": [0.8, 1.2]}})
    args = env_overrides(want)
    for command in ("sim_driver", "deploy"):
        got = sim.env_config(compose(*args, config=command).env)
        assert got.randomization == want.randomization and got.action_history == 3, command
        assert got.task_config == {"episode_steps": 48}, command  # the episode length the policy trained with
    env = lift_env(randomization={"action_latency": [2, 2]})
    _, cfg = deploy_cfg(f"deploy.domain_id={random.randint(1, 99)}")
    transport = DdsTransport(cfg.domain_id, loopback=True)
    try:
        driver = SimDriver(env, cfg, transport, episodes=1, log=lambda m: None)
        driver._reset(0)
        assert driver.episode_latency == pytest.approx(2 / env.cfg.control_hz)
        q = driver.data.qpos[driver.qpos_adr].copy()
        t = time.monotonic()
        driver._cmd_queue.append((t, "pos", q + 0.1))
        driver._apply_command(t)  # not yet: the command takes effect two control ticks after it arrived
        assert driver.counts["commands"] == 0
        time.sleep(2 / env.cfg.control_hz + 0.01)
        driver._apply_command(time.monotonic())
        assert driver.counts["commands"] == 1
        np.testing.assert_allclose(driver.data.ctrl[driver.act_of], q + 0.1)
    finally:
        transport.close()
        env.close()


def test_the_sim_driver_puts_the_randomizations_observation_noise_on_the_object_not_on_the_joint_encoders():
    # sim adds obs_noise_std to observations only; on the wire, joint-state noise would also shake the node's IK
    # (peg_insert expert dry run with 5 mm on joint states: 1/5, on the object only: 10/10; docs/results/sim2real.md)
    from robot_rl import sim
    from robot_rl.real.cli.sim_driver import driver_noise
    from tests.test_real_config import compose

    cfg = compose("randomization=sim2real", config="sim_driver")
    env_cfg = sim.env_config(cfg.env)
    assert env_cfg.randomization.obs_noise_std == 0.005
    assert driver_noise(cfg, env_cfg) == {"position_std": 0.0, "velocity_std": 0.0, "object_std": 0.005}
    cfg = compose("randomization=sim2real", "noise.position_std=0.001", "noise.object_std=0", config="sim_driver")
    assert driver_noise(cfg, env_cfg) == {"position_std": 0.001, "velocity_std": 0.0, "object_std": 0.0}


def test_ik_anchor_leads_from_the_measured_pose_toward_the_last_command_at_most_lead_m():
    from robot_rl.real.observation import ObservationModel

    env = lift_env()
    try:
        env.reset(5)
        _, cfg = deploy_cfg()
        om = ObservationModel(env, cfg.joints)
        measured = env.qpos[0, om.qpos_adr].copy()
        np.testing.assert_array_equal(om.ik_anchor(measured, None, 0.04), measured)  # no command sent yet
        arm = om.arm_in_cmd
        near, far = measured.copy(), measured.copy()
        near[arm] += 0.01  # a command a few millimetres ahead: the anchor is the command itself
        far[arm] += 0.3  # far ahead (a blocked arm): the anchor stops lead_m short of the measured hand
        far[-2:] = 0.0  # fingers are not the arm: they stay measured
        np.testing.assert_allclose(om.ik_anchor(measured, near, 0.04), near)
        np.testing.assert_array_equal(om.ik_anchor(measured, near, 0.0), measured)  # 0: the measured pose
        q = om.ik_anchor(measured, far, 0.04)
        assert np.linalg.norm(om.ee_pos(far) - om.ee_pos(measured)) > 0.1
        assert np.linalg.norm(om.ee_pos(q) - om.ee_pos(measured)) == pytest.approx(0.04, rel=0.15)
        np.testing.assert_array_equal(q[-2:], measured[-2:])
        gap = (q - measured)[arm] / (far - measured)[arm]
        np.testing.assert_allclose(gap, gap[0])  # along the segment toward the command
    finally:
        env.close()

