"""The node's step planner: from an observation to the joint targets of one policy step, and each tick's command.

    policy step (every rate_hz / control_hz ticks), from the step's observation:
        push it onto the observation history (policies/runner.py's ObsHistory)
        human action if teleop is live (queued chunks are void; the policy replans when the human lets go)
        else request a chunk from the worker if the blender wants one (never waits), take this step's blended
            base action and compose it with the residual (real/residual.py, on this freshest observation)
        action -> joint targets by the sim's IK (ActionSpace.to_ctrl) from the current state, the arm anchored on
            the last command sent (deploy.ik_lead_m; the node's _ik_phys)
        no action yet (the chunk is late): the step is pending; a chunk arriving during it is applied at once
        (late update), one arriving after it leaves the step held (starved)
    tick: the step's target (interpolation hold) or a ramp toward it from the step's start (linear)

Chunks carry the generation they were requested in; discard() voids every queued and in-flight one (reset,
take-over, new episode, back from a hold, safe stop).
"""

from __future__ import annotations

import collections
import time

import numpy as np

from robot_rl.policies.base import INSTRUCTION
from robot_rl.policies.runner import ObsHistory
from robot_rl.real.blending import ChunkBlender
from robot_rl.real.residual import apply_residual


def request_history(history: dict, instruction: np.ndarray | None) -> dict:
    """What the worker is sent: a copy of the observation history [1, obs_horizon, ...], plus the instruction
    (str array [1]) for a policy that reads one."""
    out = {k: v.copy() for k, v in history.items()}
    if instruction is not None:
        out[INSTRUCTION] = instruction.copy()
    return out


class StepPlanner:
    def __init__(self, cfg, spec, env, worker, safety, ctrl_to_wire: np.ndarray, *, residual, residual_scale: float,
                 counts: collections.Counter, on_step, log, actions=None):
        """on_step(obs, action, intervention): every executed (or held) step, for the recorder. actions: the
        ActionHistory the observations read (real/observation.py), given each executed (or held) step's action."""
        ratio = cfg.rate_hz / spec.control_hz
        if ratio < 1 - 1e-9 or abs(ratio - round(ratio)) > 1e-6:
            raise ValueError(
                f"deploy.rate_hz={cfg.rate_hz} must be a whole multiple of the policy's control_hz={spec.control_hz}"
            )
        self.ticks_per_step = int(round(ratio))
        self.cfg, self.spec, self.worker, self.safety = cfg, spec, worker, safety
        self.residual, self.residual_scale = residual, float(residual_scale)
        if hasattr(residual, "check_base"):  # a trained residual: the worker must serve the base it was trained on
            residual.check_base(spec)
        self.counts, self.on_step, self.log = counts, on_step, log
        self.actions = actions
        self.instruction = np.array([cfg.instruction], dtype=object) if spec.instruction else None
        self.action_space = env.action_space
        self.action_dim = spec.action_dim
        self.ctrl_to_wire = ctrl_to_wire  # ctrl (actuator order) -> command vector (wire order)
        self.blender = ChunkBlender(cfg.blending, spec.action_horizon)
        self.history = ObsHistory(spec.obs_dims, spec.obs_horizon, 1, spec.image_shapes)
        self.generation = 0  # bumped whenever queued chunks become meaningless
        self._request_gen: dict[int, tuple[int, float]] = {}
        self.worker_dead = False
        self.chunk_latency = collections.deque(maxlen=100_000)  # s, request -> result
        # s, a policy step's start (its observation) -> its policy action's joint targets (then published at once):
        # ~0 when the action was ready, the wait for the chunk on a late update; starved steps have none
        self.action_latency = collections.deque(maxlen=360_000)
        self.step_t0 = 0.0
        self.step = 0
        self.tick_in_step = 0
        self.step_obs: dict | None = None
        self.target_q: np.ndarray | None = None
        self.step_start_cmd: np.ndarray | None = None
        self.pending = False  # this step's action has not arrived yet
        self.pending_step = 0  # the step that is pending (the counter moves on at its last tick; it stays pending
        # until its action arrives or the next step's first tick starves it)
        self.teleop_active = False
        self.last_action = self.action_space.neutral.astype(np.float64)

    # ---- chunks ------------------------------------------------------------------------------------
    def restart(self) -> None:
        """A new episode (or a restart after a reset): from step 0, nothing queued."""
        self.generation += 1
        self.blender.reset()
        self.step, self.tick_in_step = 0, 0
        self.history.reset()
        if self.actions is not None:
            self.actions.reset()
        self.step_obs, self.target_q, self.pending = None, None, False
        self.teleop_active = False
        self.last_action = self.action_space.neutral.astype(np.float64)
        if not self.worker_dead:
            self.worker.reset()

    def discard(self) -> None:
        """Void queued and in-flight chunks: they were planned for a world that moved on."""
        self.generation += 1
        self.blender.reset()
        self.pending = False

    def can_request(self) -> bool:
        return not self.worker.busy and not self.worker_dead

    def prime(self, obs: dict, now: float) -> None:
        """Request the episode's first chunk from the state the robot holds (step 0 then starts with its action)."""
        self.history.reset()
        self.history.push(obs)
        self._request(now)

    def _request(self, now: float) -> None:
        rid = self.worker.request(request_history(self.history.data, self.instruction), self.step)
        self._request_gen[rid] = (self.generation, now)

    def poll_worker(self, now: float):
        """Yield once per chunk that arrived and was queued; worker errors and death latch a safe stop."""
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
                yield
            elif r[0] == "error":
                self.log(f"policy raised: {r[2]}")
                self.safety.latch(f"policy raised: {r[2].splitlines()[0]}")
            elif r[0] == "died":
                self.worker_dead = True
                self.safety.latch("policy worker died")

    # ---- steps -------------------------------------------------------------------------------------
    def starve(self) -> None:
        """The step ended without its action: it was held."""
        self.counts["starved_steps"] += 1
        self._record_step(self._hold_action(), self.teleop_active)
        self.pending = False

    def policy_step(self, now: float, phys, obs: dict, teleop_action: np.ndarray | None) -> None:
        """Plan step `self.step` from its observation; teleop_action: the human's, when teleop is live."""
        self.history.push(obs)
        self.step_obs, self.step_t0 = obs, now
        self.step_start_cmd = self.safety.last.copy()
        if teleop_action is not None:
            if not self.teleop_active:
                self.teleop_active = True
                self.discard()
            self.counts["intervention_steps"] += 1
            self._apply(teleop_action, phys, intervention=True)
            return
        if self.teleop_active:  # the human let go: the policy restarts from the present
            self.teleop_active = False
            self.discard()
        if self.can_request() and self.blender.wants_request(self.step):
            self._request(now)
        base = self.blender.action(self.step)
        if base is None:
            self.pending, self.pending_step = True, self.step
            return
        self._apply_base(base, phys)

    def late_update(self, phys_now) -> bool:
        """The pending step's chunk arrived: compute its action now (IK from phys_now(), the state now, as sim's
        IK starts from the current state, anchored as at the step's start). False when it still has none. The pending
        step's own row of the chunk: after its last tick the counter already names the next step."""
        base = self.blender.action(self.pending_step)
        if base is None:
            return False
        self.pending = False
        self.counts["late_updates"] += 1
        self._apply_base(base, phys_now())
        return True

    def _apply_base(self, base: np.ndarray, phys) -> None:
        try:
            action = apply_residual(self.residual, self.residual_scale, self.step_obs, base)
        except Exception as e:  # noqa: BLE001 - any residual failure stops the robot safely
            self.safety.latch(f"residual raised: {type(e).__name__}: {e}")
            return
        self._apply(action, phys, intervention=False)
        self.action_latency.append(time.monotonic() - self.step_t0)

    def _apply(self, action: np.ndarray, phys, intervention: bool) -> None:
        ctrl = self.action_space.to_ctrl(np, np.asarray(action, dtype=np.float64)[None], phys)[0]
        self.target_q = ctrl[self.ctrl_to_wire]
        self.last_action = np.asarray(action, dtype=np.float64)
        self._record_step(action, intervention)

    def _hold_action(self) -> np.ndarray:
        """The action a held step amounts to: no motion, the last gripper command."""
        if self.action_space.kind == "joint_pos":
            return self.last_action.copy()
        a = np.zeros(self.action_dim)
        a[-1] = self.last_action[-1]
        return a

    def _record_step(self, action, intervention: bool) -> None:
        if self.actions is not None:
            self.actions.push(np.asarray(action)[None])
        if self.step_obs is not None:
            self.on_step(self.step_obs, action, intervention)

    # ---- ticks -------------------------------------------------------------------------------------
    def tick_command(self) -> np.ndarray:
        """This tick's joint command (before the safety filter)."""
        if self.target_q is None:
            return self.safety.last.copy()
        if self.cfg.interpolation == "hold":
            return self.target_q
        frac = (self.tick_in_step + 1) / self.ticks_per_step
        return self.step_start_cmd + frac * (self.target_q - self.step_start_cmd)

    def next_tick(self) -> None:
        self.tick_in_step += 1
        if self.tick_in_step == self.ticks_per_step:
            self.tick_in_step = 0
            self.step += 1
