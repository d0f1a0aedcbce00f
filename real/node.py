"""The control node: a fixed-rate loop from joint states to safe joint commands, over any transport.

One thread runs the loop. Between ticks it sleeps in `transport.wait`, which returns when a message or an
inference result arrives, so receipt times are exact and a fresh chunk is used the moment it lands.

    every tick (deploy.rate_hz, default 100 Hz):
        drain inputs (real/node_io.py): joint states (checked by the safety layer), e-stop, reset, teleop,
            object pose, episode events, cameras; inference results
        safety watchdog -> WAITING (nothing sent) | RUNNING | HOLDING (last command again) | STOPPED
        the episode state machine (real/episode_state.py) says whether steps may run: a new episode (or a
            restart after a reset) first plans its first chunk while the position is held, and reports `ready`
        on a policy step (every rate_hz / control_hz ticks): the step planner (real/step_planner.py) turns the
            observation (real/observation.py, the sim task's code) into joint targets: teleop, or the worker's
            blended base chunk + the residual in the loop, then the sim's IK
        command = the step's target (hold) or a ramp toward it (linear), through the safety filter; publish
    when a chunk arrives after its step began: the step's action is computed and sent right away.

Exceptions from the policy or the residual, and a dead inference worker, latch a safe stop. Malformed inputs are
dropped and counted (real/node_io.py); any other exception in the loop latches a stop, sends the safe-stop command
and a `stopped` status, and leaves run() as NodeFault with one line naming it.
"""

from __future__ import annotations

import collections
import dataclasses
import time

import numpy as np

from robot_rl.policies.base import SpecMismatch, check_instructions
from robot_rl.real.config import DeployConfig
from robot_rl.real.episode_state import EpisodeState
from robot_rl.real.node_io import NodeIO, bag_topics  # noqa: F401 - bag_topics: the recorder's topics, imported from here
from robot_rl.real.observation import ObservationModel
from robot_rl.real.reset_token import new_token
from robot_rl.real.safety import Mode, SafetyFilter
from robot_rl.real.step_planner import StepPlanner, request_history  # noqa: F401 - request_history: part of this API
from robot_rl.real.tick_clock import TickClock
from robot_rl.sim.robot import ctrl_index


def model_joints(env) -> dict[str, tuple[float, float]]:
    """The joints the robot is commanded by (its description's: the arm's, then the gripper's) and their ranges in
    the env's model."""
    m = env.model
    return {j: (float(m.joint(j).range[0]), float(m.joint(j).range[1])) for j in env.task.robot.joints}


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


POLL_S = 0.0005  # s between looks at the inference worker's pipe while a chunk is in flight


class NodeFault(RuntimeError):
    """The control loop failed on an unexpected exception; the safe stop and a `stopped` status went out first."""


class ControlNode:
    def __init__(self, cfg: DeployConfig, env, worker, transport, *, residual=None, residual_scale: float = 1.0,
                 recorder=None, policy_name: str = "", max_episodes: int | None = None,
                 duration_s: float | None = None, reset_token: str | None = None, log=print):
        """reset_token: what a reset message must carry (None: a fresh one, in `self.reset_token`)."""
        self.cfg, self.env, self.worker, self.transport = cfg, env, worker, transport
        self.spec = worker.spec
        check_spec(self.spec, env, cfg.topics.cameras, cfg.instruction)
        self.recorder, self.policy_name = recorder, policy_name
        self.max_episodes, self.duration_s, self.log = max_episodes, duration_s, log
        self.obs_model = ObservationModel(env, cfg.joints)
        self.safety = SafetyFilter(cfg, self.obs_model.ee_pos, log=log)
        self.clock = TickClock(cfg.rate_hz, cfg.phase_lock, cfg.phase_margin_s)
        self.counts: collections.Counter = collections.Counter()
        self.planner = StepPlanner(
            cfg, self.spec, env, worker, self.safety, np.array([ctrl_index(env.task.robot, j) for j in cfg.joints]),
            residual=residual, residual_scale=residual_scale, counts=self.counts,
            on_step=recorder.add if recorder is not None else lambda *a: None, log=log, actions=self.obs_model.actions)
        self.obs_keys = list(self.spec.obs_dims) + list(self.spec.image_shapes)
        self.needs_object = "object" in self.spec.obs_dims
        target_dim = env.task.target_dim
        if cfg.task_target is not None and len(cfg.task_target) != target_dim:
            raise ValueError(f"deploy.task_target={cfg.task_target} must have {target_dim} numbers for task "
                             f"{env.task_name}")
        self.reset_token = reset_token or new_token()
        if reset_token is None:  # robot-rl-deploy prints its own; anyone else embedding the node learns it here
            log(f"reset token {self.reset_token}: a reset message must carry it (or request_local_reset())")
        self.io = NodeIO(cfg, transport, self.spec, self.safety, recorder, self.counts,
                         None if self.needs_object else self.obs_model.object_pose_default(), target_dim=target_dim,
                         reset_token=self.reset_token)
        self.episode = EpisodeState(cfg.task_target)
        self.mode = Mode.WAITING
        self._stop_sent = False
        self._paused = False
        self._status_due = 0.0
        self.stopping = False
        if self.episode.target is not None:
            self._begin_episode({"event": "start", "index": 0}, time.monotonic(), implicit=True)

    # what recorders (real/robot_actor.py's EpisodeTap), the CLI and tests read of the node
    q = property(lambda self: self.io.q)
    qd = property(lambda self: self.io.qd)
    object_pose = property(lambda self: self.io.object_pose)
    images = property(lambda self: self.io.images)
    target = property(lambda self: self.episode.target)
    obs_to_cmd = property(lambda self: self.io.obs_to_cmd)
    recv_to_cmd = property(lambda self: self.io.recv_to_cmd)
    chunk_latency = property(lambda self: self.planner.chunk_latency)

    # ---- main loop --------------------------------------------------------------------------------
    def run(self) -> dict:
        from robot_rl.real.realtime import make_realtime

        self.realtime = make_realtime(self.cfg.realtime_priority, self.log)
        t_start = time.monotonic()
        self.clock.t0 = t_start
        self.safety.arm(t_start)
        try:
            self._loop(t_start)
        except Exception as e:  # noqa: BLE001 - whatever broke, the robot is stopped before the loop is left
            raise self._fault(e) from e
        self._publish_status()
        return self.metrics()

    def _loop(self, t_start: float) -> None:
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
            if self.max_episodes is not None and self.episode.done >= self.max_episodes:
                self.stopping = True

    def _fault(self, e: Exception) -> NodeFault:
        """Latch a stop for an unexpected exception, send the safe-stop command and a `stopped` status."""
        what = f"{type(e).__name__}: {e}".splitlines()[0][:200]
        self.safety.latch(f"internal error: {what}")
        sent = []
        for step in (self._on_stopped, lambda: self._set_mode(Mode.STOPPED), self._publish_status):
            try:
                step()
                sent.append(True)
            except Exception:  # noqa: BLE001 - a second failure must not hide the first or skip the rest
                sent.append(False)
        done = "safe stop and a 'stopped' status sent" if all(sent) else "the safe stop may not have gone out"
        return NodeFault(f"control loop failed: {what} ({done})")

    def request_local_reset(self) -> None:
        """The operator's reset at the node's machine (robot-rl-deploy: SIGUSR1); safe to call from a signal handler."""
        self.io.local_reset = True

    def _drain(self, now: float) -> None:
        self.io.drain(now, self.clock, self._reset, self._on_episode_event)
        for _ in self.planner.poll_worker(now):
            if self.episode.first_chunk():
                self._status_due = 0.0
            elif self.planner.pending and self.mode == Mode.RUNNING:
                self._late_update(now)

    def _tick(self, now: float) -> None:
        mode = self.safety.watchdog(now, self.io.state_t)
        if mode == Mode.STOPPED:
            self._on_stopped()
            self._set_mode(mode)
            return
        if mode == Mode.WAITING or self.episode.index is None:
            self._set_mode(Mode.WAITING)
            return
        anchor = self.episode.anchor(self.io.state_t)
        if anchor is None:
            return  # the state after the episode reset has not arrived yet
        if anchor or self.safety.last is None:
            self.safety.start(self.io.q, now)
        object_stale = self.needs_object and self.io.object_stale(now)
        if mode == Mode.HOLDING or object_stale:
            if object_stale:
                self.counts["object_stale_ticks"] += 1
            self._paused = True
            self._set_mode(Mode.HOLDING)
            self.io.send_hold(measure=False)
            return
        if self._paused:  # back from a hold: queued chunks were planned for a world that moved on
            self._paused = False
            self.planner.discard()
            self.episode.prime_sent = False  # a first chunk in flight is void too: plan it again
        self._set_mode(Mode.RUNNING)
        if self.episode.priming:
            self._prime(now)
        if not self.episode.may_step(self.io.state_t):
            self.io.send_hold(measure=True)
            return
        planner = self.planner
        if planner.tick_in_step == 0:
            if planner.pending:
                planner.starve()
            obs = self._observation()
            if self.needs_object and self.io.object_stamp_ns < self.io.state_stamp_ns:
                self.counts["object_older_than_state_steps"] += 1  # perception behind the joints (diagnostics)
            planner.policy_step(now, self._ik_phys(), obs, self.io.teleop_action if self.io.teleop_live(now) else None)
        self.io.send(planner.tick_command(), measure=True)
        planner.next_tick()

    # ---- episodes, reset, stop --------------------------------------------------------------------
    def _on_episode_event(self, ev: dict, t: float) -> None:
        if ev["event"] == "start":
            self._begin_episode(ev, t)
        else:
            self._end_episode(ev)

    def _begin_episode(self, ev: dict, t: float, implicit: bool = False) -> None:
        target = ev.get("target", self.cfg.task_target)
        if target is None:
            self.safety.reject("rejected_episode_event_target", "episode start without target and no deploy.task_target")
            return
        if self.recorder is not None and self.recorder.active:
            self.recorder.end(False, partial=True)
        self.episode.begin(ev, target, t, implicit)
        self.planner.restart()
        if self.recorder is not None:
            self.recorder.begin(seed=self.episode.seed, episode_index=self.episode.index)
        self._status_due = 0.0  # acknowledge at once

    def _end_episode(self, ev: dict) -> None:
        if not self.episode.is_running(ev):
            return
        if self.recorder is not None:
            self.recorder.end(bool(ev.get("success", False)), driver_steps=ev.get("steps"))
        self.episode.end()
        self.counts["episodes"] += 1
        self.counts["successes"] += int(bool(ev.get("success", False)))
        self.planner.target_q = None
        self.planner.pending = False
        self._status_due = 0.0

    def _reset(self, now: float) -> None:
        if not self.safety.stopped:
            return
        if self.planner.worker_dead:
            self.counts["refused_resets"] += 1
            self.log("reset refused: the policy worker died; restart robot-rl-deploy")
            return
        why = self.safety.request_reset(now, self.io.state_t)
        if why is not None:
            self.counts["refused_resets"] += 1
            self.log(f"reset refused: {why}")
            return
        self._stop_sent = False
        self.episode.restart()
        self.planner.restart()
        if self.episode.index is not None and self.recorder is not None:
            self.recorder.begin(seed=self.episode.seed, episode_index=self.episode.index, after_reset=True)
        self._status_due = 0.0

    def _on_stopped(self) -> None:
        if self._stop_sent:
            return
        self._stop_sent = True
        self.log(f"safe stop: {self.safety.stop_reason}")
        if self.safety.last is not None:
            self.io.send_stop()
        self.planner.discard()
        if self.recorder is not None and self.recorder.active:
            self.recorder.end(False, partial=True, stop_reason=self.safety.stop_reason)

    def _set_mode(self, mode: Mode) -> None:
        if mode != self.mode:
            self.mode = mode
            self._status_due = 0.0

    # ---- planning glue ----------------------------------------------------------------------------
    def _observation(self):
        """The policy's observation dict [1, dim] of the latest state."""
        io = self.io
        phys = self.obs_model.phys(io.q, io.qd, io.object_pose)
        obs = self.obs_model.observe(phys, self.episode.target)
        for cam, img in io.images.items():
            obs[f"images/{cam}"] = img[None]
        return {k: obs[k] for k in self.obs_keys}

    def _ik_phys(self):
        """Phys the IK of this step's ee_delta action starts from: the latest state, the arm anchored on the last
        command sent (deploy.ik_lead_m, real/observation.py ik_anchor)."""
        io = self.io
        q = self.obs_model.ik_anchor(io.q, self.safety.last, self.cfg.ik_lead_m)
        return self.obs_model.phys(q, io.qd, io.object_pose)

    def _prime(self, now: float) -> None:
        """Request the episode's first chunk from the state the robot holds (step 0 then starts with its action)."""
        if self.io.teleop_live(now):
            self.episode.priming = False  # a human acts from step 0: nothing to plan
            return
        if self.episode.prime_sent or not self.planner.can_request():
            return
        obs = self._observation()
        self.planner.prime(obs, now)
        self.episode.prime_sent = True

    def _late_update(self, now: float) -> None:
        if not self.planner.late_update(self._ik_phys):
            return
        if self.planner.target_q is not None and not self.safety.stopped:
            self.io.send(self.planner.tick_command(), measure=False)  # limited over the time since the tick's

    # ---- outputs ----------------------------------------------------------------------------------
    def status(self) -> dict:
        return {
            "mode": self.mode.value, "stop_reason": self.safety.stop_reason, "episode": self.episode.index,
            "ready": self.episode.index is not None and not self.episode.priming,
            "step": self.planner.step, "source": "teleop" if self.planner.teleop_active else "policy",
            "safety": dict(self.safety.counts), "counts": dict(self.counts), "last_rejection": self.safety.last_rejection,
        }

    def _publish_status(self) -> None:
        self.io.publish_status(self.status(), lambda: self.episode.status_sent(time.monotonic()))
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
            "step_action_latency_p50_ms": pct(self.planner.action_latency, 50),
            "step_action_latency_p99_ms": pct(self.planner.action_latency, 99),
            "episodes": self.counts["episodes"], "successes": self.counts["successes"],
            "realtime": bool(getattr(self, "realtime", False)),
            "safety": dict(self.safety.counts), "counts": dict(self.counts), "stop_reason": self.safety.stop_reason,
            "received": dict(self.io.received),
        }
