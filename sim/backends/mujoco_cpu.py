"""MuJoCo C backend: physics through `mujoco.rollout` (C++ thread pool, GIL released), task logic in numpy.

The batch's physics state is one array [N, nstate] (mjSTATE_FULLPHYSICS); qpos / qvel / mocap_pos are
views into it. Each control step is one rollout call of `substeps` physics steps for all envs, then one
kinematics pass per env for the frame sensors (see `position_sensors`); task code then runs once over all
envs as batched numpy ([N, ...]). Each env has its own MjModel copy so that domain randomization is per env;
the same copy carries the episode's visual randomization and task colours and renders the env's images.
"""

from __future__ import annotations

import copy
import os
import mujoco
import numpy as np
from mujoco import rollout

from robot_rl.sim import actions, core
from robot_rl.sim.config import EnvConfig
from robot_rl.sim.env import BatchedEnv
from robot_rl.sim.randomization import ModelFields
from robot_rl.sim.task import Phys


class MujocoEnv(BatchedEnv):
    def __init__(self, cfg: EnvConfig):
        super().__init__(cfg)
        task, n = self.task, self.num_envs
        self.model = mujoco.MjModel.from_xml_string(
            task.model_xml(cfg.physics_dt, cfg.solver_iterations, cfg.ls_iterations)
        )
        task.bind(self.model)
        self.fields = ModelFields(self.model, task)
        self.models = [copy.copy(self.model) for _ in range(n)]
        self.substeps = cfg.substeps
        threads = min(cfg.threads or os.cpu_count() or 1, n)
        self._rollout = rollout.Rollout(nthread=threads)
        self._thread_datas = [mujoco.MjData(self.model) for _ in range(max(threads, 1))]
        self._scratch = mujoco.MjData(self.model)
        lay = task.layout
        self._spec = mujoco.mjtState.mjSTATE_FULLPHYSICS.value
        nstate = mujoco.mj_stateSize(self.model, self._spec)
        off = state_offsets(self.model, self._spec)
        self.state = np.zeros((n, nstate))
        self.qpos = self.state[:, off["QPOS"] : off["QPOS"] + lay.nq]
        self.qvel = self.state[:, off["QVEL"] : off["QVEL"] + lay.nv]
        # Mocap bodies (goal markers, fixtures) are not physics state: they ride in the control vector.
        self._control_spec = int(mujoco.mjtState.mjSTATE_CTRL.value | mujoco.mjtState.mjSTATE_MOCAP_POS.value)
        self._control = np.zeros((n, self.substeps, lay.nu + 3 * lay.nmocap))
        self.mocap_pos = np.zeros((n, lay.nmocap, 3))
        self.sensordata = np.zeros((n, lay.nsensordata))
        self.ctrl = np.zeros((n, lay.nu))
        self._prev_ctrl = np.zeros((n, lay.nu))
        self._state_out = np.zeros((n, self.substeps, nstate))
        self.target = np.zeros((n, task.target_dim), dtype=np.float32)
        self.params: dict = {}
        self.key = np.zeros(n, dtype=np.uint32)
        self.episode = np.zeros(n, dtype=np.uint32)
        self.steps = np.zeros(n, dtype=np.int32)
        self.ret = np.zeros(n, dtype=np.float32)
        self.latency_buf = np.zeros((n, cfg.randomization.max_latency + 1, self.action_dim), dtype=np.float32)
        self._seeded = False
        self._init_visuals(self.model)

    # ---- physics ----------------------------------------------------------------------------------
    def _physics(self) -> None:
        nu = self.ctrl.shape[1]
        self._control[:, :, :nu] = self.ctrl[:, None, :]
        self._control[:, :, nu:] = self.mocap_pos.reshape(self.num_envs, 1, -1)
        self._rollout.rollout(
            self.models, self._thread_datas, self.state, self._control, control_spec=self._control_spec,
            nstep=self.substeps, skip_checks=True, state=self._state_out,
        )
        self.state[:] = self._state_out[:, -1]
        # Not the rollout's sensordata: mj_step evaluates sensors before it integrates, one physics step behind qpos.
        d = self._scratch
        for i, m in enumerate(self.models):
            d.qpos[:] = self.qpos[i]
            d.mocap_pos[:] = self.mocap_pos[i]
            position_sensors(m, d)
            self.sensordata[i] = d.sensordata

    def phys(self) -> Phys:
        return Phys(self.qpos, self.qvel, self.sensordata, self.mocap_pos)

    # ---- reset --------------------------------------------------------------------------------------
    def _reset_envs(self, idx: np.ndarray) -> None:
        params, qpos, mocap, target = core.sample_episode(
            np, self.task, self.cfg.randomization, self.key[idx], self.episode[idx]
        )
        visuals = self._visual_draws(self.key[idx], self.episode[idx]) if self.visual.active else None
        d = self._scratch
        for j, i in enumerate(idx):
            self._place(i, {k: v[j] for k, v in params.items()}, qpos[j], mocap[j], d)
            if visuals is not None:
                self.visual.apply(self.models[i], {k: v[j] for k, v in visuals.items()}, target[j])
            mujoco.mj_getState(self.models[i], d, self.state[i], self._spec)
            self.sensordata[i] = d.sensordata
            self.mocap_pos[i] = d.mocap_pos
        for k, v in params.items():
            self.params.setdefault(k, np.zeros(self.num_envs, dtype=v.dtype))[idx] = v
        self.target[idx] = target
        # the targets a new episode's first step moves from (a speed-limited gripper's: open)
        self._prev_ctrl[idx] = self.action_space.reset_ctrl(np, qpos[:, self.task.layout.arm_qpos])
        self.steps[idx] = 0
        self.ret[idx] = 0.0
        self.latency_buf[idx] = self.action_space.neutral

    def _place(self, i: int, params: dict, qpos: np.ndarray, mocap: np.ndarray, d: mujoco.MjData) -> None:
        """Apply one episode's draws to env i's model; put `d` in the episode's forward-computed initial state."""
        m = self.models[i]
        self.fields.apply_mujoco(m, {k: float(v) for k, v in params.items() if k != "latency"})
        mujoco.mj_resetData(m, d)
        d.qpos[:] = qpos
        if self.task.layout.nmocap:
            d.mocap_pos[:] = mocap
        mujoco.mj_forward(m, d)

    def start_episode(self, i: int, episode: int, data: mujoco.MjData) -> tuple[dict, np.ndarray]:
        """Env i's `episode`-th episode for the current seed (the draws reset / auto-reset give it) in `data`.

        Randomizes `self.models[i]` for that episode and puts `data` (of that model) in its initial state,
        forward-computed; returns (params {name: [1]}, target [target_dim]). The env's own state is untouched."""
        if not self._seeded:
            raise RuntimeError("call reset(seed) before start_episode()")
        params, qpos, mocap, target = core.sample_episode(
            np, self.task, self.cfg.randomization, self.key[i : i + 1], np.array([episode], dtype=np.uint32)
        )
        self._place(i, {k: v[0] for k, v in params.items()}, qpos[0], mocap[0], data)
        if self.visual.active:
            visuals = self._visual_draws(self.key[i : i + 1], np.array([episode], dtype=np.uint32))
            self.visual.apply(self.models[i], {k: v[0] for k, v in visuals.items()}, target[0])
        return {k: np.asarray(v) for k, v in params.items()}, np.asarray(target[0], dtype=np.float64)

    def _observe(self, images: bool = True) -> dict:
        obs = core.observe(
            np, self.task, self.phys(), self.target, self.params, self.cfg.randomization.obs_noise_std,
            self.key, self.episode, self.steps,
        )
        if images and self.cameras:
            obs.update(self._images(np.arange(self.num_envs)))
        return obs

    def _images(self, idx) -> dict:
        return self._render_images(self.models, self.qpos, self.mocap_pos, idx)

    def _episode_ids(self):
        return self.key, self.episode, self.target

    def _reset(self, keys: np.ndarray) -> dict:
        self.key = np.asarray(keys, dtype=np.uint32).copy()
        self.episode[:] = 0
        self._reset_envs(np.arange(self.num_envs))
        self._seeded = True
        return self._observe()

    def _restart(self, idx: np.ndarray, advance: bool = False) -> dict:
        if not self._seeded:
            raise RuntimeError("call reset(seed) before restart() / end_episodes()")
        if advance:
            self.episode[idx] += 1
        self._reset_envs(idx)
        obs = {k: v[idx] for k, v in self._observe(images=False).items()}
        if self.cameras and len(idx):
            obs.update(self._images(idx))
        return obs

    # ---- step ---------------------------------------------------------------------------------------
    def _step(self, action: np.ndarray):
        if not self._seeded:
            raise RuntimeError("call reset(seed) before step()")
        self.latency_buf, executed = actions.delay(np, self.latency_buf, action, self.params["latency"])
        self.ctrl = self.action_space.to_ctrl(np, executed.astype(np.float64), self.phys(), self._prev_ctrl)
        self._prev_ctrl = self.ctrl.copy()  # self.ctrl: the targets this step ran with, also after an auto-reset
        self._physics()
        self.steps += 1
        reward, success, progress = core.evaluate(np, self.task, self.phys(), self.target, self.params)
        reward = reward.astype(np.float32)
        self.ret += reward
        obs = self._observe()
        truncated = self.steps >= self.task.cfg.episode_steps
        terminated = success & self.cfg.terminate_on_success
        done = terminated | truncated
        info = {
            "success": success,
            "progress": progress.astype(np.float32),
            "intervention": np.zeros(self.num_envs, dtype=bool),
            "terminated": terminated,
            "truncated": truncated & ~terminated,
            "episode_return": self.ret.copy(),
            "episode_length": self.steps.copy(),
        }
        if done.any():
            info["final_obs"] = {k: v.copy() for k, v in obs.items()}
            idx = np.nonzero(done)[0]
            self.episode[idx] += 1
            self._reset_envs(idx)
            fresh = self._observe(images=False)
            for k in fresh:
                obs[k][idx] = fresh[k][idx]
            if self.cameras:  # only the reset envs need new frames
                for k, v in self._images(idx).items():
                    obs[k][idx] = v
        else:
            info["final_obs"] = obs
        return obs, reward, done, info

    def _render_state(self, i: int):
        m, d = self.models[i], self._scratch
        mujoco.mj_setState(m, d, self.state[i], self._spec)
        d.mocap_pos[:] = self.mocap_pos[i]
        mujoco.mj_forward(m, d)
        return m, d

    def close(self) -> None:
        super().close()
        if self._rollout is not None:
            self._rollout.close()
            self._rollout = None


def position_sensors(model: mujoco.MjModel, data: mujoco.MjData) -> None:
    """Fill data.sensordata for data.qpos and mocap_pos: forward kinematics and position-stage sensors, no dynamics.

    Task sensors are frame sensors (sim.task.Layout checks), so this is all they need. It leaves the solver
    warm start alone, so calling it between mj_step calls does not change the trajectory."""
    mujoco.mj_kinematics(model, data)
    mujoco.mj_sensorPos(model, data)


def state_offsets(model, spec: int) -> dict[str, int]:
    """Offset of each mjtState component (e.g. "QPOS") inside a state vector of `spec`."""
    out, pos = {}, 0
    for bit in sorted(mujoco.mjtState.__members__.values(), key=lambda b: b.value):
        v = bit.value
        if v and (v & (v - 1)) == 0 and spec & v:
            out[bit.name.replace("mjSTATE_", "")] = pos
            pos += mujoco.mj_stateSize(model, v)
    return out
