"""robot-rl-sim-driver's robot: the task's MuJoCo physics behaving like a ros2_control robot over a transport.

Like a ros2_control system with a joint_state_broadcaster and a forward_position_controller (or a
joint_trajectory_controller), it runs a fixed-rate update loop (default 100 Hz, `physics_dt` steps in
between) that reads the latest command, sets the position servos' targets, steps physics and publishes

    /joint_states               sensor_msgs/JointState   (deploy.joints order; position, velocity, effort)
    /robot_rl/object_pose       geometry_msgs/PoseStamped (the task object, as a perception node would)
    /robot_rl/episode           std_msgs/String           episode start/end events (real/episode_events.py)

and accepts std_msgs/Float64MultiArray on the position-command topic (one value per joint) and
trajectory_msgs/JointTrajectory on the trajectory topic (the last point is reached linearly over its
time_from_start). Commands of the wrong length, with unknown joint names or NaN/inf are ignored and
counted, as ros2_control's controllers do.

Episodes use the same env and seeds as in-process evaluation: episode k of the driver starts from the
state `env.reset(seed)` gives env 0 in its k-th episode (`MujocoEnv.start_episode`: the env's key and
episode counter k, randomization applied to the model), success is checked every control step
(1 / control_hz) with the task's own `evaluate`, and an episode ends at success (terminate_on_success) or
after episode_steps control steps. Physics stays frozen after a reset until the control node acknowledges
the episode on its status topic, so no simulated time passes before the node is ready.

Optional injections: command latency (a command takes effect command_latency_s after arrival), joint
state latency, and Gaussian noise on published positions, velocities and object positions. Under a randomization
preset (env.randomization) the robot is the sim's in every respect it can be: its dynamics draws per episode, and
the episode's drawn action latency (ticks of 1 / control_hz, the same draw as in sim for that episode) adds to
command_latency_s; robot-rl-sim-driver puts obs_noise_std on the published object position unless given (sim adds
it to every observation entry; joint states stay exact unless noise.position_std says otherwise: a robot's encoders
are precise, and noisy joint states would also shake the node's IK, which sim's noise never reaches).
"""

from __future__ import annotations

import collections
import json
import time

import mujoco
import numpy as np

from robot_rl.real import episode_events
from robot_rl.real.config import DeployConfig
from robot_rl.real.messages import (
    Float64MultiArray, Header, JointState, JointTrajectory, Point, Pose, PoseStamped, Quaternion, String, now_stamp,
)
from robot_rl.real.qos import LATEST, RELIABLE, SENSOR_DATA
from robot_rl.real.tick_clock import TickClock
from robot_rl.sim.robot import actuator_name


class NodeTimeout(RuntimeError):
    pass


class SimDriver:
    def __init__(self, env, cfg: DeployConfig, transport, *, rate_hz: float = 100.0, seed: int = 0, episodes: int = 10,
                 command_latency_s: float = 0.0, state_latency_s: float = 0.0, position_noise_std: float = 0.0,
                 velocity_noise_std: float = 0.0, object_noise_std: float = 0.0, wait_for_node_s: float = 60.0,
                 realtime_priority: int = 0, log=print):
        self.env, self.cfg, self.transport, self.log = env, cfg, transport, log
        self.task = env.task
        ecfg = env.cfg  # the simulated robot steps the MuJoCo model itself: it reads the backend's physics settings
        sub = 1.0 / (rate_hz * ecfg.physics_dt)
        if abs(sub - round(sub)) > 1e-6 or sub < 1:
            raise ValueError(f"rate_hz={rate_hz} and physics_dt={ecfg.physics_dt}: 1 / (rate_hz * physics_dt) must be a whole number")
        per_step = rate_hz / ecfg.control_hz
        if abs(per_step - round(per_step)) > 1e-6 or per_step < 1:
            raise ValueError(f"rate_hz={rate_hz} must be a whole multiple of control_hz={ecfg.control_hz}")
        self.substeps, self.ticks_per_step = int(round(sub)), int(round(per_step))
        self.rate_hz, self.seed, self.episodes = rate_hz, int(seed), int(episodes)
        self.command_latency, self.state_latency = float(command_latency_s), float(state_latency_s)
        self.episode_latency = 0.0  # s, the episode's drawn action latency (env.randomization.action_latency)
        self.noise = (float(position_noise_std), float(velocity_noise_std), float(object_noise_std))
        self.rng = np.random.default_rng(seed)
        self.wait_for_node_s = float(wait_for_node_s)
        self.realtime_priority = int(realtime_priority)

        env.reset(seed)  # sets the per-env keys the episodes are drawn from
        self.model = env.models[0]
        self.data = mujoco.MjData(self.model)
        m = self.model
        self.joints = list(cfg.joints)
        self.qpos_adr = np.array([m.jnt_qposadr[m.joint(j).id] for j in self.joints])
        self.dof_adr = np.array([m.jnt_dofadr[m.joint(j).id] for j in self.joints])
        # wire index -> the servo that drives the joint (the robot description's)
        self.act_of = np.array([m.actuator(actuator_name(env.task.robot, j)).id for j in self.joints])
        self.obj_adr = self.task.obj_qpos

        t = cfg.topics
        self.sub_pos = transport.subscribe(t.position_commands, Float64MultiArray, RELIABLE)
        self.sub_traj = transport.subscribe(t.trajectory_commands, JointTrajectory, RELIABLE)
        self.sub_status = transport.subscribe(t.status, String, LATEST)
        # joint_state_broadcaster publishes with system-default (reliable) QoS; the node reads best effort
        self.pub_state = transport.publisher(t.joint_states, JointState, RELIABLE)
        self.pub_object = transport.publisher(t.object_pose, PoseStamped, SENSOR_DATA)
        self.pub_episode = transport.publisher(t.episode, String, RELIABLE)

        self.clock = TickClock(rate_hz)
        self.counts: collections.Counter = collections.Counter()
        self.results: list[dict] = []
        self._cmd_queue: collections.deque = collections.deque()  # (receipt time, kind, payload)
        self._ramp = None  # (start positions, target positions, t_start, duration)
        self._state_queue: collections.deque = collections.deque()  # (due time, msg)
        self.node_episode = None
        self.accepting = False  # commands are taken only while an acknowledged episode runs
        self.stopping = False

    # ---- episodes ---------------------------------------------------------------------------------
    def _reset(self, k: int) -> np.ndarray:
        """Episode k of env 0 for the seed: exactly the state in-process evaluation starts from."""
        d = self.data
        self.params, self._target = self.env.start_episode(0, k, d)
        self.episode_latency = float(self.params["latency"][0]) / self.env.control_hz  # 0 without randomization
        d.ctrl[self.act_of] = d.qpos[self.qpos_adr]  # servos hold the reset posture
        self._cmd_queue.clear()
        self._ramp = None
        return self._target

    def run(self) -> dict:
        from robot_rl.real.realtime import make_realtime

        make_realtime(self.realtime_priority, self.log)
        self.clock.t0 = time.monotonic()
        for k in range(self.episodes):
            if self.stopping:
                break
            target = self._reset(k)
            self._await_node(k, target)
            if self.stopping:
                break
            r = self._run_episode(k)
            if r.get("interrupted"):
                break  # like a robot driver that dies: no end event, the node's watchdog takes over
            self.results.append(r)
            self.pub_episode.publish(episode_events.end_event(k, r["success"], r["steps"]))
            self.log(f"episode {k}: {'success' if r['success'] else 'failure'} after {r['steps']} control steps")
        return self.metrics()

    def _await_node(self, k: int, target: np.ndarray) -> None:
        """Publish the frozen initial state and the start event until the node acknowledges episode k."""
        start = episode_events.start_event(k, target, seed=self.seed)
        self.accepting = False
        t_begin = time.monotonic()
        next_announce = t_begin
        while self.node_episode != k and not self.stopping:
            now = self._sleep_to_tick()
            if now - t_begin > self.wait_for_node_s:
                raise NodeTimeout(
                    f"no control node acknowledged episode {k} within {self.wait_for_node_s:.0f} s on "
                    f"{self.cfg.topics.status}; is robot-rl-deploy running with the same deploy config and domain?"
                )
            self._publish_state(now)
            if now >= next_announce:  # events are volatile: a node that starts late needs a repeat
                self.pub_episode.publish(start)
                next_announce = now + 0.5
        self._cmd_queue.clear()
        self.accepting = True

    def _run_episode(self, k: int) -> dict:
        steps, ticks, success = 0, 0, False
        limit = self.task.cfg.episode_steps
        while True:
            now = self._sleep_to_tick()
            self._apply_command(now)
            mujoco.mj_step(self.model, self.data, nstep=self.substeps)
            ticks += 1
            self._publish_state(now)
            if ticks % self.ticks_per_step == 0:
                steps += 1
                success = success or bool(self._success())
                if (success and self.env.terminate_on_success) or steps >= limit:
                    return {"index": k, "seed": self.seed, "success": success, "steps": steps,
                            "latency_s": self.command_latency + self.episode_latency}
            if self.stopping:
                return {"index": k, "seed": self.seed, "success": success, "steps": steps, "interrupted": True}

    def _success(self) -> bool:
        from robot_rl.sim.backends.mujoco_cpu import position_sensors
        from robot_rl.sim.task import Phys

        d = self.data
        # frame sensors at the final qpos, as the sim env evaluates (mj_step leaves them one physics step behind)
        position_sensors(self.model, d)
        phys = Phys(d.qpos[None], d.qvel[None], d.sensordata[None], d.mocap_pos[None])
        _, success, _ = self.task.evaluate(np, phys, self._target[None], self.params)
        return bool(np.asarray(success)[0])

    # ---- loop pieces ------------------------------------------------------------------------------
    def _sleep_to_tick(self) -> float:
        """Sleep to the next update; everything arriving meanwhile is taken at once (the wait returns while
        any reader holds data, so leaving commands unread until the tick would spin)."""
        deadline = self.clock.deadline
        while True:
            now = time.monotonic()
            self._read_status()
            self._take_commands()
            if now >= deadline:
                break
            self.transport.wait(deadline - now)
        self.clock.start_tick(now)
        return now

    def _read_status(self) -> None:
        for msg, _ in self.sub_status.take():
            try:
                st = json.loads(msg.data)
                # the node is ready once it has planned the episode's first action (older nodes send no "ready")
                self.node_episode = st.get("episode") if st.get("ready", True) else None
            except (json.JSONDecodeError, AttributeError):
                self.counts["bad_status"] += 1

    def _take_commands(self) -> None:
        """Queue valid commands with their receipt time (dropped while no episode runs)."""
        accept = self.accepting
        n = len(self.joints)
        for msg, t in self.sub_pos.take():
            q = np.asarray(msg.data, dtype=np.float64)
            if q.shape != (n,) or not np.isfinite(q).all():
                self.counts["rejected_commands"] += 1
            elif accept:
                self._cmd_queue.append((t, "pos", q))
        for msg, t in self.sub_traj.take():
            if not msg.points:  # an empty trajectory stops the controller where it is
                if accept:
                    self._cmd_queue.append((t, "stop", None))
                continue
            names = list(msg.joint_names)
            pt = msg.points[-1]
            q = np.asarray(pt.positions, dtype=np.float64)
            if sorted(names) != sorted(self.joints) or q.shape != (n,) or not np.isfinite(q).all():
                self.counts["rejected_commands"] += 1
            elif accept:
                q = q[[names.index(j) for j in self.joints]]
                dur = pt.time_from_start.sec + pt.time_from_start.nanosec * 1e-9
                self._cmd_queue.append((t, "traj", (q, dur)))

    def _apply_command(self, now: float) -> None:
        d = self.data
        latest = None
        due = time.monotonic() - self.command_latency - self.episode_latency  # receipt times are taken after `now`
        while self._cmd_queue and self._cmd_queue[0][0] <= due:
            latest = self._cmd_queue.popleft()
            self.counts["commands"] += 1
        if latest is not None:
            _, kind, payload = latest
            current = d.ctrl[self.act_of].copy()
            if kind == "pos":
                self._ramp = None
                d.ctrl[self.act_of] = payload
            elif kind == "stop":
                self._ramp = None
                d.ctrl[self.act_of] = d.qpos[self.qpos_adr]
            else:
                q, dur = payload
                self._ramp = (current, q, now, max(dur, 1e-9))
        if self._ramp is not None:
            a, b, t0, dur = self._ramp
            frac = min(1.0, (now + 1.0 / self.rate_hz - t0) / dur)  # the target this update cycle reaches
            d.ctrl[self.act_of] = a + frac * (b - a)
            if frac >= 1.0:
                self._ramp = None

    def _publish_state(self, now: float) -> None:
        d = self.data
        pn, vn, on = self.noise
        q = d.qpos[self.qpos_adr].copy()
        qd = d.qvel[self.dof_adr].copy()
        if pn > 0:
            q += pn * self.rng.standard_normal(q.shape)
        if vn > 0:
            qd += vn * self.rng.standard_normal(qd.shape)
        header = Header(stamp=now_stamp(), frame_id="")
        js = JointState(header=header, name=list(self.joints), position=q.tolist(), velocity=qd.tolist(),
                        effort=d.qfrc_actuator[self.dof_adr].tolist())
        pos = d.qpos[self.obj_adr : self.obj_adr + 3].copy()
        if on > 0:
            pos += on * self.rng.standard_normal(3)
        w, x, y, z = d.qpos[self.obj_adr + 3 : self.obj_adr + 7]
        pose = PoseStamped(header=Header(stamp=header.stamp, frame_id="world"),
                           pose=Pose(position=Point(*map(float, pos)), orientation=Quaternion(float(x), float(y), float(z), float(w))))
        # The pose first: the node ticks just after a joint state arrives, and a pose of the same instant that
        # arrived after it would be read one tick (10 ms) stale.
        if self.state_latency > 0:
            self._state_queue.append((now + self.state_latency, js, pose))
            while self._state_queue and self._state_queue[0][0] <= now:
                _, js_d, pose_d = self._state_queue.popleft()
                self.pub_object.publish(pose_d)
                self.pub_state.publish(js_d)
        else:
            self.pub_object.publish(pose)
            self.pub_state.publish(js)

    def metrics(self) -> dict:
        succ = [r["success"] for r in self.results]
        return {
            "episodes": len(self.results),
            "successes": int(sum(succ)),
            "success_rate": float(np.mean(succ)) if succ else None,
            "results": self.results,
            "seed": self.seed,
            "rate_hz": self.rate_hz,
            "counts": dict(self.counts),
            **{f"driver_{k}": v for k, v in self.clock.stats().items() if k != "phase_locked"},
        }
