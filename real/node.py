"""The control node: a fixed-rate loop from joint states to safe joint commands, over any transport.

One thread runs the loop. Between ticks it sleeps in `transport.wait`, which returns when a message or an
inference result arrives, so receipt times are exact and a fresh chunk is used the moment it lands.

    every tick (deploy.rate_hz, default 100 Hz):
        drain inputs: joint states (checked by the safety layer), e-stop, reset, teleop, object pose,
                      episode events, cameras; inference results
        safety watchdog -> WAITING (nothing sent) | RUNNING | HOLDING (last command again) | STOPPED
        a new episode (or a restart after a reset): the first chunk is planned from the initial state while the
            position is held; only then does the status report `ready` (the sim driver starts physics on it)
        on a policy step (every rate_hz / control_hz ticks):
            observation from the latest state by the sim task's code (real/observation.py)
            human action if teleop is live, else request a chunk if the blender wants one (never waits)
            and take this step's blended base action + the residual
            action -> joint targets by the sim's IK (ActionSpace.to_ctrl) from the current state
        command = the step's target (hold) or a ramp toward it (linear), through the safety filter
        publish Float64MultiArray or JointTrajectory
    when a chunk arrives after its step began: the step's action is computed and sent right away.

Exceptions from the policy or the residual, and a dead inference worker, latch a safe stop.
"""

from __future__ import annotations

import collections
import dataclasses
import json
import time

import numpy as np

from policies.base import INSTRUCTION, SpecMismatch, check_instructions
from policies.runner import ObsHistory
from real import episode_events
from real.blending import ChunkBlender
from real.config import DeployConfig
from real.messages import (
    Bool, Empty, Float64MultiArray, Image, JointState, JointTrajectory, JointTrajectoryPoint, PoseStamped, String,
    duration, float_array, stamp_ns,
)
from real.observation import ObservationModel, ros_quat_to_mujoco
from real.qos import LATEST, RELIABLE, SENSOR_DATA
from real.residual import apply_residual
from real.safety import Mode, SafetyFilter
from real.tick_clock import TickClock


def model_joints(env) -> dict[str, tuple[float, float]]:
    """Actuated joints of the env's model and their ranges, in actuator order."""
    import mujoco

    m = env.model
    out = {}
    for a in range(m.nu):
        j = int(m.actuator_trnid[a, 0])
        out[mujoco.mj_id2name(m, mujoco.mjtObj.mjOBJ_JOINT, j)] = (float(m.jnt_range[j, 0]), float(m.jnt_range[j, 1]))
    return out


def check_spec(spec, env, cameras: dict, instruction: str = "") -> None:
    """Raise SpecMismatch unless the policy fits the env; image keys need a configured camera topic, and a policy
    that reads an instruction needs deploy.instruction (ValueError naming the limit when it is unusable)."""
    images = [k for k in spec.obs_dims if k.startswith("images/")] + list(getattr(spec, "image_shapes", {}))
    missing = [k for k in images if k[len("images/"):] not in cameras]
    if missing:
        raise SpecMismatch(f"the policy reads {missing}; add deploy.topics.cameras.<name>: <image topic> for each")
    if getattr(spec, "instruction", False):
        if not instruction:
            raise SpecMismatch("the policy reads a language instruction: set deploy.instruction='...' "
                               "(ros2 launch ... instruction:='...')")
        check_instructions([instruction], 1)
    vector = {k: v for k, v in spec.obs_dims.items() if not k.startswith("images/")}
    dataclasses.replace(spec, obs_dims=vector, image_shapes={}, instruction=False).check_env(env)


def request_history(history: dict, instruction: np.ndarray | None) -> dict:
    """What the worker is sent: a copy of the observation history [1, obs_horizon, ...], plus the instruction
    (str array [1]) for a policy that reads one."""
    out = {k: v.copy() for k, v in history.items()}
    if instruction is not None:
        out[INSTRUCTION] = instruction.copy()
    return out


def bag_topics(cfg: DeployConfig) -> dict[str, type]:
    """Topic -> message type of everything the node records into a rosbag."""
    t = cfg.topics
    cmd = Float64MultiArray if cfg.command_type == "position_array" else JointTrajectory
    return {t.joint_states: JointState, t.estop: Bool, t.reset: Empty, t.teleop: Float64MultiArray,
            t.object_pose: PoseStamped, t.episode: String, cfg.command_topic: cmd, t.status: String}


POLL_S = 0.0005  # s between looks at the inference worker's pipe while a chunk is in flight


class ControlNode:
    def __init__(self, cfg: DeployConfig, env, worker, transport, *, residual=None, residual_scale: float = 1.0,
                 recorder=None, policy_name: str = "", max_episodes: int | None = None,
                 duration_s: float | None = None, log=print):
        self.cfg, self.env, self.worker, self.transport = cfg, env, worker, transport
        self.spec = worker.spec
        check_spec(self.spec, env, cfg.topics.cameras, cfg.instruction)
        self.instruction = np.array([cfg.instruction], dtype=object) if self.spec.instruction else None
        ratio = cfg.rate_hz / self.spec.control_hz
        if ratio < 1 - 1e-9 or abs(ratio - round(ratio)) > 1e-6:
            raise ValueError(
                f"deploy.rate_hz={cfg.rate_hz} must be a whole multiple of the policy's control_hz={self.spec.control_hz}"
            )
        self.ticks_per_step = int(round(ratio))
        self.residual, self.residual_scale = residual, float(residual_scale)
        if hasattr(residual, "check_base"):  # a trained residual: the worker must serve the base it was trained on
            residual.check_base(self.spec)
        self.recorder, self.policy_name = recorder, policy_name
        self.max_episodes, self.duration_s, self.log = max_episodes, duration_s, log
        self.obs_model = ObservationModel(env, cfg.joints)
        self.safety = SafetyFilter(cfg, self.obs_model.ee_pos)
        self.blender = ChunkBlender(cfg.blending, self.spec.action_horizon)
        self.clock = TickClock(cfg.rate_hz, cfg.phase_lock, cfg.phase_margin_s)
        self.action_space = env.action_space
        self.action_dim = self.spec.action_dim
        self.obs_keys = list(self.spec.obs_dims) + list(self.spec.image_shapes)
        # ctrl (actuator order) -> command vector (wire order)
        acts = list(model_joints(env))
        self._ctrl_to_wire = np.array([acts.index(j) for j in cfg.joints])
        self.needs_object = "object" in self.spec.obs_dims

        t = cfg.topics
        self.sub_state = transport.subscribe(t.joint_states, JointState, SENSOR_DATA)
        self.sub_estop = transport.subscribe(t.estop, Bool, LATEST)
        self.sub_reset = transport.subscribe(t.reset, Empty, LATEST)
        self.sub_teleop = transport.subscribe(t.teleop, Float64MultiArray, RELIABLE)
        self.sub_object = transport.subscribe(t.object_pose, PoseStamped, SENSOR_DATA)
        self.sub_episode = transport.subscribe(t.episode, String, RELIABLE)
        self.sub_cameras = {c: transport.subscribe(topic, Image, SENSOR_DATA) for c, topic in t.cameras.items()}
        cmd_type = Float64MultiArray if cfg.command_type == "position_array" else JointTrajectory
        self.pub_cmd = transport.publisher(cfg.command_topic, cmd_type, RELIABLE)
        self.pub_status = transport.publisher(t.status, String, LATEST)
        self._bag_topic = {"joint_states": t.joint_states, "estop": t.estop, "reset": t.reset, "teleop": t.teleop,
                           "object_pose": t.object_pose, "episode": t.episode, "command": cfg.command_topic,
                           "status": t.status}

        # measured state
        self.q = self.qd = None
        self.state_t: float | None = None  # receipt, time.monotonic()
        self.state_stamp_ns = 0
        self._prev_state: tuple[int, np.ndarray] | None = None
        self.object_pose = None if self.needs_object else self.obs_model.object_pose_default()
        self.object_t = None
        self.object_stamp_ns = 0
        self.images: dict[str, np.ndarray] = {}
        self.teleop_action = None
        self.teleop_t = -np.inf
        # episode and policy-step state
        self.episode: int | None = None
        self.episode_seed = -1
        self.target = None if cfg.task_target is None else np.asarray(cfg.task_target, dtype=np.float64)
        self.episodes_done = 0
        self.step = 0
        self.tick_in_step = 0
        self.history = ObsHistory(self.spec.obs_dims, self.spec.obs_horizon, 1, self.spec.image_shapes)
        self.step_obs: dict | None = None
        self.target_q: np.ndarray | None = None
        self.step_start_cmd: np.ndarray | None = None
        self.pending = False  # this step's action has not arrived yet
        # Planning an episode's first chunk before step 0: in sim the first action acts from t = 0; here it would
        # otherwise land inference-latency late, and every episode's first step would be short.
        self.priming = False
        self._prime_sent = False
        self._ready_pending = False  # the first chunk arrived; `ready` goes out with the next status
        self._start_after: float | None = None  # step 0 starts on a state received after `ready` went out
        self.generation = 0  # bumped whenever queued chunks become meaningless (reset, take-over, new episode)
        self._request_gen: dict[int, tuple[int, float]] = {}
        self._anchor_after: float | None = None  # re-anchor the command on a state received after this time
        self.last_action = self.action_space.neutral.astype(np.float64)
        self.teleop_active = False
        self.mode = Mode.WAITING
        self._stop_sent = False
        self._paused = False
        self._status_due = 0.0
        self.worker_dead = False
        self.stopping = False
        self.counts: collections.Counter = collections.Counter()
        self.obs_to_cmd = collections.deque(maxlen=360_000)  # s, header stamp of the state -> command publish
        self.recv_to_cmd = collections.deque(maxlen=360_000)  # s, receipt of the state -> command publish
        self.chunk_latency = collections.deque(maxlen=100_000)  # s, request -> result
        if self.target is not None:
            self._begin_episode({"event": "start", "index": 0}, time.monotonic(), implicit=True)

    # ---- main loop --------------------------------------------------------------------------------
    def run(self) -> dict:
        from real.realtime import make_realtime

        self.realtime = make_realtime(self.cfg.realtime_priority, self.log)
        t_start = time.monotonic()
        self.clock.t0 = t_start
        while not self.stopping:
            deadline = self.clock.deadline
            while True:
                now = time.monotonic()
                self._drain(now)
                if now >= deadline or self.stopping:
                    break
                # with a chunk in flight, look at the worker's pipe every POLL_S; otherwise sleep to the tick
                self.transport.wait(min(deadline - now, POLL_S) if self.worker.busy else deadline - now)
            now = time.monotonic()
            self.clock.start_tick(now)
            self._tick(now)
            if now >= self._status_due:
                self._publish_status()
            if self.recorder is not None:
                self.recorder.flush()
            if self.duration_s is not None and now - t_start >= self.duration_s:
                self.stopping = True
            if self.max_episodes is not None and self.episodes_done >= self.max_episodes:
                self.stopping = True
        self._publish_status()
        return self.metrics()

    # ---- inputs -----------------------------------------------------------------------------------
    def _drain(self, now: float) -> None:
        wall = time.time_ns()
        for msg, t in self.sub_state.take():
            self._record("joint_states", msg, wall)
            ok = self.safety.check_joint_state(msg.name, msg.position, msg.velocity)
            if ok is None:
                continue
            q, qd = ok
            stamp = stamp_ns(msg.header.stamp)
            if qd is None:  # no velocities published: difference successive positions over their stamps
                prev = self._prev_state
                qd = (q - prev[1]) / ((stamp - prev[0]) * 1e-9) if prev is not None and stamp > prev[0] else np.zeros_like(q)
            self._prev_state = (stamp, q)
            self.q, self.qd, self.state_t, self.state_stamp_ns = q, qd, t, stamp
            self.clock.arrival(t)
        for msg, t in self.sub_estop.take():
            self._record("estop", msg, wall)
            self.safety.on_estop(msg.data)
        for msg, t in self.sub_reset.take():
            self._record("reset", msg, wall)
            self._reset(now)
        for msg, t in self.sub_teleop.take():
            self._record("teleop", msg, wall)
            a = self.safety.check_vector("teleop", msg.data, self.action_dim)
            if a is not None:
                self.teleop_action, self.teleop_t = a, t
        for msg, t in self.sub_object.take():
            self._record("object_pose", msg, wall)
            p, o = msg.pose.position, msg.pose.orientation
            v = self.safety.check_vector("object_pose", [p.x, p.y, p.z, o.x, o.y, o.z, o.w], 7)
            if v is not None:
                self.object_pose, self.object_t = np.concatenate([v[:3], ros_quat_to_mujoco(*v[3:])]), t
                self.object_stamp_ns = stamp_ns(msg.header.stamp)
        for cam, sub in self.sub_cameras.items():
            for msg, t in sub.take():
                img = self._image(cam, msg)
                if img is not None:
                    self.images[cam] = img
        for msg, t in self.sub_episode.take():
            self._record("episode", msg, wall)
            try:
                ev = episode_events.parse(msg)
            except episode_events.EpisodeEventError as e:
                self.safety.reject("rejected_episode_event", str(e))
                continue
            if ev["event"] == "start":
                self._begin_episode(ev, t)
            else:
                self._end_episode(ev)
        self._drain_worker(now)

    def _image(self, cam: str, msg: Image) -> np.ndarray | None:
        if msg.encoding != "rgb8" or msg.step != 3 * msg.width or len(msg.data) != msg.step * msg.height:
            self.safety.reject("rejected_image", f"image must be rgb8 with step = 3 * width, got {msg.encoding}")
            return None
        shape = self.spec.image_shapes.get(f"images/{cam}")
        if shape is not None and tuple(shape) != (msg.height, msg.width, 3):
            self.safety.reject("rejected_image", f"camera {cam}: the policy reads {tuple(shape)} images, got "
                               f"{(msg.height, msg.width, 3)}")
            return None
        return np.asarray(msg.data, dtype=np.uint8).reshape(msg.height, msg.width, 3)

    def _drain_worker(self, now: float) -> None:
        for r in self.worker.poll():
            if r[0] == "chunk":
                _, rid, start, chunk, secs = r
                gen, t_req = self._request_gen.pop(rid, (-1, now))
                self.chunk_latency.append(now - t_req)
                if gen != self.generation or self.safety.stopped:
                    continue
                if chunk.shape != (self.spec.action_horizon, self.action_dim):
                    self.safety.latch(f"policy returned a chunk of shape {chunk.shape}, expected "
                                      f"{(self.spec.action_horizon, self.action_dim)}")
                    continue
                self.blender.add(chunk, start, self.step)
                if self.priming:
                    self.priming, self._ready_pending = False, True
                    self._status_due = 0.0
                elif self.pending and self.mode == Mode.RUNNING:
                    self._late_update(now)
            elif r[0] == "error":
                self.log(f"policy raised: {r[2]}")
                self.safety.latch(f"policy raised: {r[2].splitlines()[0]}")
            elif r[0] == "died":
                self.worker_dead = True
                self.safety.latch("policy worker died")

    # ---- episodes, reset --------------------------------------------------------------------------
    def _begin_episode(self, ev: dict, t: float, implicit: bool = False) -> None:
        target = ev.get("target", self.cfg.task_target)
        if target is None:
            self.safety.reject("rejected_episode_event", "episode start without target and no deploy.task_target")
            return
        if self.recorder is not None and self.recorder.active:
            self.recorder.end(False, partial=True)
        self.episode, self.episode_seed = int(ev["index"]), int(ev.get("seed", -1))
        self.target = np.asarray(target, dtype=np.float64)
        self._restart_policy()
        self._anchor_after = None if implicit else t
        if self.recorder is not None:
            self.recorder.begin(seed=self.episode_seed, episode_index=self.episode)
        self._status_due = 0.0  # acknowledge at once

    def _end_episode(self, ev: dict) -> None:
        if self.episode is None or ev["index"] != self.episode:
            return
        if self.recorder is not None:
            self.recorder.end(bool(ev.get("success", False)), driver_steps=ev.get("steps"))
        self.episodes_done += 1
        self.counts["episodes"] += 1
        self.counts["successes"] += int(bool(ev.get("success", False)))
        self.episode = None
        self.target_q = None
        self.pending = False
        self._status_due = 0.0

    def _restart_policy(self) -> None:
        self.generation += 1
        self.blender.reset()
        self.step, self.tick_in_step = 0, 0
        self.history.reset()
        self.step_obs, self.target_q, self.pending = None, None, False
        self.priming, self._prime_sent, self._ready_pending, self._start_after = True, False, False, None
        self.teleop_active = False
        self.last_action = self.action_space.neutral.astype(np.float64)
        if not self.worker_dead:
            self.worker.reset()

    def _reset(self, now: float) -> None:
        if not self.safety.stopped:
            return
        if self.worker_dead:
            self.counts["refused_resets"] += 1
            self.log("reset refused: the policy worker died; restart robot-rl-deploy")
            return
        why = self.safety.request_reset(now, self.state_t)
        if why is not None:
            self.counts["refused_resets"] += 1
            self.log(f"reset refused: {why}")
            return
        self._stop_sent = False
        self._restart_policy()
        if self.episode is not None and self.recorder is not None:
            self.recorder.begin(seed=self.episode_seed, episode_index=self.episode, after_reset=True)
        self._status_due = 0.0

    # ---- the tick ---------------------------------------------------------------------------------
    def _tick(self, now: float) -> None:
        mode = self.safety.watchdog(now, self.state_t)
        if mode == Mode.STOPPED:
            self._on_stopped()
            self._set_mode(mode)
            return
        if mode == Mode.WAITING or self.episode is None:
            self._set_mode(Mode.WAITING)
            return
        if self._anchor_after is not None:
            if self.state_t is None or self.state_t < self._anchor_after:
                return  # the state after the episode reset has not arrived yet
            self._anchor_after = None
            self.safety.start(self.q)
        elif self.safety.last is None:
            self.safety.start(self.q)
        object_stale = self.needs_object and (self.object_t is None or now - self.object_t > self.cfg.watchdog.object_timeout_s)
        if mode == Mode.HOLDING or object_stale:
            if object_stale:
                self.counts["object_stale_ticks"] += 1
            self._paused = True
            self._set_mode(Mode.HOLDING)
            self._publish(self.safety.hold(), now)
            return
        if self._paused:  # back from a hold: queued chunks were planned for a world that moved on
            self._paused = False
            self.generation += 1
            self.blender.reset()
            self.pending = False
            self._prime_sent = False  # a first chunk in flight is void too: plan it again
        self._set_mode(Mode.RUNNING)
        if self.priming:
            self._prime(now)
        if self.priming or self._ready_pending or (self._start_after is not None and self.state_t < self._start_after):
            self._publish(self.safety.hold(), now)
            return
        self._start_after = None
        if self.tick_in_step == 0:
            if self.pending:
                self.counts["starved_steps"] += 1
                self._record_step(self._hold_action(), self.teleop_active)
                self.pending = False
            self._policy_step(now)
        cmd = self._tick_command()
        self._publish(self.safety.filter(cmd, self.q), now)
        self.tick_in_step += 1
        if self.tick_in_step == self.ticks_per_step:
            self.tick_in_step = 0
            self.step += 1

    def _set_mode(self, mode: Mode) -> None:
        if mode != self.mode:
            self.mode = mode
            self._status_due = 0.0

    def _on_stopped(self) -> None:
        if self._stop_sent:
            return
        self._stop_sent = True
        self.log(f"safe stop: {self.safety.stop_reason}")
        if self.safety.last is not None:
            if self.cfg.command_type == "joint_trajectory":
                # an empty trajectory makes joint_trajectory_controller stop and hold where it is
                self.pub_cmd.publish(JointTrajectory(joint_names=list(self.cfg.joints)))
            else:
                self.pub_cmd.publish(float_array(self.safety.hold()))
        self.generation += 1
        self.blender.reset()
        self.pending = False
        if self.recorder is not None and self.recorder.active:
            self.recorder.end(False, partial=True, stop_reason=self.safety.stop_reason)

    def _observation(self):
        """(Phys, the policy's observation dict [1, dim]) of the latest state."""
        phys = self.obs_model.phys(self.q, self.qd, self.object_pose)
        obs = self.obs_model.observe(phys, self.target)
        for cam, img in self.images.items():
            obs[f"images/{cam}"] = img[None]
        return phys, {k: obs[k] for k in self.obs_keys}

    def _prime(self, now: float) -> None:
        """Request the episode's first chunk from the state the robot holds (step 0 then starts with its action)."""
        if now - self.teleop_t <= self.cfg.teleop_timeout_s:
            self.priming = False  # a human acts from step 0: nothing to plan
            return
        if self._prime_sent or self.worker.busy or self.worker_dead:
            return
        _, obs = self._observation()
        self.history.reset()
        self.history.push(obs)
        rid = self.worker.request(request_history(self.history.data, self.instruction), self.step)
        self._request_gen[rid] = (self.generation, now)
        self._prime_sent = True

    def _policy_step(self, now: float) -> None:
        phys, obs = self._observation()
        if self.needs_object and self.object_stamp_ns < self.state_stamp_ns:
            self.counts["object_older_than_state_steps"] += 1  # perception behind the joints (diagnostics)
        self.history.push(obs)
        self.step_obs = obs
        self.step_start_cmd = self.safety.hold()
        if now - self.teleop_t <= self.cfg.teleop_timeout_s:
            if not self.teleop_active:
                self.teleop_active = True
                self.generation += 1
                self.blender.reset()
            self.counts["intervention_steps"] += 1
            self._apply(self.teleop_action, phys, intervention=True)
            return
        if self.teleop_active:  # the human let go: the policy restarts from the present
            self.teleop_active = False
            self.generation += 1
            self.blender.reset()
        if not self.worker.busy and not self.worker_dead and self.blender.wants_request(self.step):
            rid = self.worker.request(request_history(self.history.data, self.instruction), self.step)
            self._request_gen[rid] = (self.generation, now)
        base = self.blender.action(self.step)
        if base is None:
            self.pending = True
            return
        self._apply_base(base, phys)

    def _apply_base(self, base: np.ndarray, phys) -> None:
        try:
            action = apply_residual(self.residual, self.residual_scale, self.step_obs, base)
        except Exception as e:  # noqa: BLE001 - any residual failure stops the robot safely
            self.safety.latch(f"residual raised: {type(e).__name__}: {e}")
            return
        self._apply(action, phys, intervention=False)

    def _apply(self, action: np.ndarray, phys, intervention: bool) -> None:
        ctrl = self.action_space.to_ctrl(np, np.asarray(action, dtype=np.float64)[None], phys)[0]
        self.target_q = ctrl[self._ctrl_to_wire]
        self.last_action = np.asarray(action, dtype=np.float64)
        self._record_step(action, intervention)

    def _late_update(self, now: float) -> None:
        base = self.blender.action(self.step)
        if base is None:
            return
        self.pending = False
        self.counts["late_updates"] += 1
        # IK from the state now (a few ms after the observation), as sim's IK starts from the current state
        self._apply_base(base, self.obs_model.phys(self.q, self.qd, self.object_pose))
        if self.target_q is not None and not self.safety.stopped:
            self._publish(self.safety.filter(self._tick_command(), self.q), now, tick=False)

    def _tick_command(self) -> np.ndarray:
        if self.target_q is None:
            return self.safety.hold()
        if self.cfg.interpolation == "hold":
            return self.target_q
        frac = (self.tick_in_step + 1) / self.ticks_per_step
        return self.step_start_cmd + frac * (self.target_q - self.step_start_cmd)

    def _hold_action(self) -> np.ndarray:
        """The action a held step amounts to: no motion, the last gripper command."""
        if self.action_space.kind == "joint_pos":
            return self.last_action.copy()
        a = np.zeros(self.action_dim)
        a[-1] = self.last_action[-1]
        return a

    def _record_step(self, action, intervention: bool) -> None:
        if self.recorder is not None and self.step_obs is not None:
            self.recorder.add(self.step_obs, action, intervention)

    # ---- outputs ----------------------------------------------------------------------------------
    def _publish(self, q: np.ndarray, now: float, tick: bool = True) -> None:
        if self.cfg.command_type == "position_array":
            msg = float_array(q)
        else:
            msg = JointTrajectory(joint_names=list(self.cfg.joints), points=[JointTrajectoryPoint(
                positions=[float(x) for x in q], time_from_start=duration(self.cfg.trajectory_time_s))])
        self.pub_cmd.publish(msg)
        wall = time.time_ns()
        if tick and self.mode == Mode.RUNNING:
            self.obs_to_cmd.append((wall - self.state_stamp_ns) * 1e-9)
            self.recv_to_cmd.append(time.monotonic() - self.state_t)
        self.counts["commands"] += 1
        self._record("command", msg, wall)

    def _record(self, what: str, msg, wall_ns: int) -> None:
        if self.recorder is not None:
            self.recorder.record(self._bag_topic[what], msg, wall_ns)

    def status(self) -> dict:
        return {
            "mode": self.mode.value, "stop_reason": self.safety.stop_reason, "episode": self.episode,
            "ready": self.episode is not None and not self.priming,
            "step": self.step, "source": "teleop" if self.teleop_active else "policy",
            "safety": dict(self.safety.counts), "counts": dict(self.counts), "last_rejection": self.safety.last_rejection,
        }

    def _publish_status(self) -> None:
        msg = String(data=json.dumps(self.status()))
        self.pub_status.publish(msg)
        if self._ready_pending:  # step 0 starts on a state measured after the robot heard `ready`
            self._ready_pending = False
            self._start_after = time.monotonic()
        self._record("status", msg, time.time_ns())
        self._status_due = time.monotonic() + 1.0 / self.cfg.status_hz

    def metrics(self) -> dict:
        def pct(d, p):
            return float(np.percentile(np.asarray(d) * 1e3, p)) if len(d) else None

        return {
            **self.clock.stats(),
            "obs_to_cmd_p50_ms": pct(self.obs_to_cmd, 50), "obs_to_cmd_p99_ms": pct(self.obs_to_cmd, 99),
            "recv_to_cmd_p50_ms": pct(self.recv_to_cmd, 50), "recv_to_cmd_p99_ms": pct(self.recv_to_cmd, 99),
            "chunk_latency_p50_ms": pct(self.chunk_latency, 50), "chunk_latency_p99_ms": pct(self.chunk_latency, 99),
            "chunk_requests": len(self.chunk_latency),
            "episodes": self.counts["episodes"], "successes": self.counts["successes"],
            "realtime": bool(getattr(self, "realtime", False)),
            "safety": dict(self.safety.counts), "counts": dict(self.counts), "stop_reason": self.safety.stop_reason,
        }
