"""MJX backend: the same task code under jax.numpy, jit + vmap over N envs, pure functional reset/step.

Functional API (for jit-compiled training loops):
    env = MjxEnv(cfg)
    state = env.reset(keys)            # keys: uint32 [N] from sim.rng.env_key
    state = env.step(state, action)    # action [N, A]; auto-reset inside
`State` is a pytree (data, obs, reward, done, metrics, info), as in MuJoCo Playground. Per-episode
domain-randomization draws live in `info["params"]`; each env's model is built from them inside vmap,
so randomized fields are batched without copying the model. Non-finite actions inside jit are replaced
by 0 and counted in `metrics["invalid_actions"]` (the host API rejects them instead).
Camera images are not part of the jitted State: the host API copies each env's qpos / mocap_pos to MuJoCo C
and renders there; `info["final_qpos"]` / `info["final_mocap_pos"]` keep the pose a finished episode ended
in, for its last frame.
A training loop that jits its own function around `reset_one` / `step_one` should pass
`compiler_options=env.compiler_options` to its top-level `jax.jit` (see `compiler_options` below).
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import warnings
from typing import Any

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
from mujoco import mjx
from mujoco.mjx._src import sensor as mjx_sensor

from robot_rl.sim import actions, core
from robot_rl.sim.config import ConfigError, EnvConfig
from robot_rl.sim.env import BatchedEnv
from robot_rl.sim.randomization import ModelFields
from robot_rl.sim.task import Phys


@jax.tree_util.register_dataclass
@dataclasses.dataclass
class State:
    data: Any
    obs: dict
    reward: jax.Array
    done: jax.Array
    metrics: dict
    info: dict

    def replace(self, **kw) -> "State":
        return dataclasses.replace(self, **kw)


def resolve_device(name: str):
    """A jax device from a config string: cpu | gpu | cuda | cuda:1 | gpu:0."""
    kind, _, idx = name.partition(":")
    kind = {"cuda": "gpu"}.get(kind, kind)
    try:
        devices = jax.devices(kind)
    except RuntimeError:
        raise ConfigError(
            f"device={name!r} is not available to jax (have: {[str(d) for d in jax.devices()]}); "
            "install the gpu extra (pip install 'robot-rl[gpu]') or use device=cpu"
        ) from None
    i = int(idx) if idx else 0
    if i >= len(devices):
        raise ConfigError(f"device={name!r}: only {len(devices)} {kind} device(s)")
    return devices[i]


# XLA:CPU's fusion emitters (the default in recent jaxlib) make MJX's forward kinematics, a chain of dependent
# quaternion products fused into one loop, cost ~16x more per body level (measured at N=16: a 7-deep hinge
# chain 280 ms instead of 0.9 ms, 9-deep 79 s instead of 1 ms; our arm's whole mjx.step 920 ms instead of
# 2.2 ms). The legacy emitter scales linearly, and the env step compiles in ~40% less CPU time with it. It
# is a per-compilation option, so other jax code in the process keeps XLA's defaults.
_CPU_COMPILER_OPTIONS = {"xla_cpu_use_fusion_emitters": False}


@functools.cache
def compiler_options(device) -> dict | None:
    """XLA compile options for MJX functions jitted for `device`; None means XLA's defaults."""
    if device.platform != "cpu":
        return None
    try:
        jax.jit(lambda x: x + 1, compiler_options=_CPU_COMPILER_OPTIONS).lower(
            jax.device_put(jnp.zeros((), jnp.float32), device)
        ).compile()
    except jax.errors.JaxRuntimeError as e:  # a jaxlib that has dropped the option
        warnings.warn(f"MJX on CPU will be slow: XLA rejected {_CPU_COMPILER_OPTIONS} ({e})", stacklevel=2)
        return None
    return dict(_CPU_COMPILER_OPTIONS)


class MjxEnv:
    """Pure functional batched env; `reset` and `step` are jit-compiled over the batch."""

    def __init__(self, cfg: EnvConfig, task, action_space):
        self.cfg, self.task, self.action_space = cfg, task, action_space
        self.mj_model = mujoco.MjModel.from_xml_string(
            task.model_xml(cfg.physics_dt, cfg.solver_iterations, cfg.ls_iterations)
        )
        task.bind(self.mj_model)
        self.fields = ModelFields(self.mj_model, task)
        self.device = resolve_device(cfg.device)
        self.model = mjx.put_model(self.mj_model, device=self.device)
        self.data0 = mjx.make_data(self.model, device=self.device)
        self.substeps = cfg.substeps
        self.max_latency = cfg.randomization.max_latency
        self.compiler_options = compiler_options(self.device)
        self.reset = jax.jit(jax.vmap(self.reset_one, in_axes=(0, 0)), compiler_options=self.compiler_options)
        self.step = jax.jit(jax.vmap(self.step_one), compiler_options=self.compiler_options)
        # per env, the first state where mask [N] says so, else the second (BatchedEnv.restart)
        self.select = jax.jit(jax.vmap(_select), compiler_options=self.compiler_options)

    # ---- single env ---------------------------------------------------------------------------------
    def _phys(self, data) -> Phys:
        return Phys(data.qpos, data.qvel, data.sensordata, data.mocap_pos)

    def reset_one(self, key, episode) -> State:
        task = self.task
        params, qpos, mocap, target = core.sample_episode(jnp, task, self.cfg.randomization, key, episode)
        model = self.fields.apply_mjx(self.model, params)
        lay = task.layout
        dtype = self.data0.qpos.dtype
        data = self.data0.replace(
            qpos=qpos.astype(dtype),
            mocap_pos=mocap.astype(dtype) if lay.nmocap else self.data0.mocap_pos,
            ctrl=self.action_space.reset_ctrl(jnp, qpos[lay.arm_qpos]).astype(dtype),  # the reset posture, open
        )
        # Only kinematics and position sensors: the next mjx.step runs the full forward pass itself, and a
        # second copy of the collision + constraint pipeline inside the jitted step would double its compile.
        data = _position_sensors(model, data)
        step = jnp.zeros((), jnp.int32)
        obs = core.observe(jnp, task, self._phys(data), target, params, self.cfg.randomization.obs_noise_std,
                           key, episode, step)
        zero = jnp.zeros((), jnp.float32)
        info = {
            "key": key, "episode": episode, "step": step, "target": target.astype(jnp.float32), "params": params,
            "latency_buf": jnp.tile(jnp.asarray(self.action_space.neutral), (self.max_latency + 1, 1)),
            "episode_return": zero, "success": jnp.zeros((), bool), "progress": zero,
            "terminated": jnp.zeros((), bool), "truncated": jnp.zeros((), bool),
            "episode_length": step, "final_obs": obs, "final_qpos": data.qpos, "final_mocap_pos": data.mocap_pos,
        }
        metrics = {"invalid_actions": jnp.zeros((), jnp.int32)}
        return State(data, obs, zero, jnp.zeros((), bool), metrics, info)

    def step_one(self, state: State, action) -> State:
        task, info = self.task, state.info
        finite = jnp.isfinite(action)
        action = jnp.clip(jnp.where(finite, action, 0.0), -1.0, 1.0).astype(jnp.float32)
        buf, executed = actions.delay(jnp, info["latency_buf"], action, info["params"]["latency"])
        data = state.data
        ctrl = self.action_space.to_ctrl(jnp, executed.astype(data.qpos.dtype), self._phys(data), data.ctrl)
        model = self.fields.apply_mjx(self.model, info["params"])
        data = data.replace(ctrl=ctrl.astype(data.ctrl.dtype))
        data = jax.lax.fori_loop(0, self.substeps, lambda _, d: mjx.step(model, d), data)
        # mjx.step evaluates sensors before it integrates: recompute them at the final qpos, as the C backend does.
        data = _position_sensors(model, data)
        step = info["step"] + 1
        phys = self._phys(data)
        reward, success, progress = core.evaluate(jnp, task, phys, info["target"], info["params"])
        reward = reward.astype(jnp.float32)
        obs = core.observe(jnp, task, phys, info["target"], info["params"], self.cfg.randomization.obs_noise_std,
                           info["key"], info["episode"], step)
        truncated = step >= task.cfg.episode_steps
        terminated = success & self.cfg.terminate_on_success
        done = terminated | truncated
        ret = info["episode_return"] + reward
        stepped = State(
            data, obs, reward, done,
            {"invalid_actions": state.metrics["invalid_actions"] + (~finite.all()).astype(jnp.int32)},
            {
                **info, "step": step, "latency_buf": buf, "episode_return": ret, "success": success,
                "progress": progress.astype(jnp.float32), "terminated": terminated,
                "truncated": truncated & ~terminated, "episode_length": step, "final_obs": obs,
                "final_qpos": data.qpos, "final_mocap_pos": data.mocap_pos,
            },
        )
        fresh = self.reset_one(info["key"], info["episode"] + jnp.uint32(1))
        # Auto-reset: physics, observation and per-episode bookkeeping come from the fresh episode;
        # what happened in this step (reward, flags, final_obs, return, length) is kept for the caller.
        keep = ("success", "progress", "terminated", "truncated", "episode_return", "episode_length", "final_obs",
                "final_qpos", "final_mocap_pos")
        merged_info = {k: (stepped.info[k] if k in keep else _select(done, fresh.info[k], stepped.info[k]))
                       for k in stepped.info}
        return stepped.replace(
            data=_select(done, fresh.data, data),
            obs=_select(done, fresh.obs, obs),
            info=merged_info,
        )


def _position_sensors(model, data):
    """Kinematics and position-stage (frame) sensors at data.qpos; no dynamics, warm start untouched."""
    return mjx_sensor.sensor_pos(model, mjx.kinematics(model, data))


def _select(pred, on_true, on_false):
    return jax.tree_util.tree_map(lambda a, b: jnp.where(pred, a, b), on_true, on_false)


# The info entries BatchedEnv.step returns (besides "intervention", which the host sets)
_STEP_INFO = ("success", "progress", "terminated", "truncated", "episode_return", "episode_length", "final_obs")


class MjxBatchedEnv(BatchedEnv):
    """Host API (numpy in / numpy out) over MjxEnv; identical semantics to the MuJoCo C backend.

    Images and `env.render` come from MuJoCo C: one MjModel copy per env (made on first use) gets the env's
    episode draws (object size, visual randomization, task colours) whenever the env starts an episode."""

    def __init__(self, cfg: EnvConfig):
        super().__init__(cfg)
        self.mjx = MjxEnv(cfg, self.task, self.action_space)
        self.model = self.mjx.mj_model
        self.state: State | None = None
        self._init_visuals(self.model)
        self._render_models: list | None = None
        self._render_episode = np.full(self.num_envs, -1, dtype=np.int64)  # episode each render model shows
        self._scratch = mujoco.MjData(self.model)

    def _reset(self, keys: np.ndarray) -> dict:
        keys = jnp.asarray(np.asarray(keys, dtype=np.uint32), device=self.mjx.device)
        self.state = self.mjx.reset(keys, jnp.zeros(self.num_envs, jnp.uint32, device=self.mjx.device))
        obs = _to_numpy(self.state.obs)
        self._render_episode[:] = -1  # a new seed: every env's episode 0 is a new episode
        if self.cameras:
            s = jax.device_get(self.state)
            all_envs = np.arange(self.num_envs)
            self._sync_render_models(s.info, all_envs)
            obs.update(self._images(s.data.qpos, s.data.mocap_pos, all_envs))
        return obs

    def phys(self) -> Phys:
        if self.state is None:
            raise RuntimeError("call reset(seed) before phys()")
        return jax.device_get(self.mjx._phys(self.state.data))  # the four arrays only, not the whole state

    def _step(self, action: np.ndarray):
        if self.state is None:
            raise RuntimeError("call reset(seed) before step()")
        st = self.state = self.mjx.step(self.state, jnp.asarray(action, device=self.mjx.device))
        # One transfer of what the host API returns, not the whole physics state (on a GPU, mjx.Data's contact
        # and constraint arrays are most of the bytes); the cameras also need the poses and episode draws.
        host = {"obs": st.obs, "reward": st.reward, "done": st.done,
                "info": st.info if self.cameras else {k: st.info[k] for k in _STEP_INFO}}
        if self.cameras:
            host["qpos"], host["mocap_pos"] = st.data.qpos, st.data.mocap_pos
        s = jax.device_get(host)
        i = s["info"]
        done = np.asarray(s["done"])
        info = {
            "success": np.asarray(i["success"]), "progress": np.asarray(i["progress"]),
            "intervention": np.zeros(self.num_envs, dtype=bool),
            "terminated": np.asarray(i["terminated"]), "truncated": np.asarray(i["truncated"]),
            "episode_return": np.asarray(i["episode_return"]), "episode_length": np.asarray(i["episode_length"]),
            "final_obs": _to_numpy(i["final_obs"]),
        }
        obs = _to_numpy(s["obs"])
        if self.cameras:
            # Every env's pose at the end of this step (before any auto-reset), with its render model still
            # showing the episode that step belonged to: the last frames of finished episodes.
            final = self._images(i["final_qpos"], i["final_mocap_pos"], np.arange(self.num_envs))
            info["final_obs"].update(final)
            obs.update(final)
            if done.any():
                idx = np.nonzero(done)[0]
                self._sync_render_models(i, idx)
                for k, v in self._images(s["qpos"], s["mocap_pos"], idx).items():
                    obs[k] = obs[k].copy()
                    obs[k][idx] = v
        return obs, np.asarray(s["reward"]), done, info

    def _restart(self, idx: np.ndarray, advance: bool = False) -> dict:
        if self.state is None:
            raise RuntimeError("call reset(seed) before restart() / end_episodes()")
        # Every env's current (or, advancing, next) episode from its start (the batch reset, compiled already),
        # kept where idx says; metrics (invalid-action counts) carry on.
        mask = np.zeros(self.num_envs, dtype=bool)
        mask[idx] = True
        mask_dev = jnp.asarray(mask, device=self.mjx.device)
        episode = self.state.info["episode"]
        if advance:
            episode = episode + mask_dev.astype(episode.dtype)
        fresh = self.mjx.reset(self.state.info["key"], episode)
        keep = self.mjx.select(mask_dev, fresh, self.state)
        self.state = keep.replace(metrics=self.state.metrics)
        obs = {k: v[idx] for k, v in _to_numpy(self.state.obs).items()}
        if self.cameras and len(idx):
            s = jax.device_get(self.state)
            self._sync_render_models(s.info, idx)
            obs.update(self._images(s.data.qpos, s.data.mocap_pos, idx))
        return obs

    # ---- rendering through MuJoCo C -----------------------------------------------------------------
    def _sync_render_models(self, info: dict, idx) -> None:
        """Bring env i's render model (i in idx) to its current episode: object size, visuals, task colours."""
        if self._render_models is None:
            self._render_models = [copy.copy(self.model) for _ in range(self.num_envs)]
        episode = np.asarray(info["episode"]).astype(np.int64)
        stale = [int(i) for i in idx if self._render_episode[i] != episode[i]]
        if not stale:
            return
        keys = np.asarray(info["key"])[stale]
        visuals = self._visual_draws(keys, episode[stale].astype(np.uint32)) if self.visual.active else None
        params = {k: np.asarray(v)[stale] for k, v in info["params"].items() if k != "latency"}
        target = np.asarray(info["target"])[stale]
        for j, e in enumerate(stale):
            m = self._render_models[e]
            self.mjx.fields.apply_mujoco(m, {k: float(v[j]) for k, v in params.items()})
            if visuals is not None:
                self.visual.apply(m, {k: v[j] for k, v in visuals.items()}, target[j])
            self._render_episode[e] = episode[e]

    def _images(self, qpos, mocap_pos, idx) -> dict:
        return self._render_images(self._render_models, np.asarray(qpos), np.asarray(mocap_pos), idx)

    def _render_state(self, i: int):
        if self.state is None:
            raise RuntimeError("call reset(seed) before render()")
        info = jax.device_get({k: self.state.info[k] for k in ("key", "episode", "target", "params")})
        self._sync_render_models(info, [i])
        qpos, mocap = jax.device_get((self.state.data.qpos[i], self.state.data.mocap_pos[i]))
        m, d = self._render_models[i], self._scratch
        d.qpos[:] = qpos
        if m.nmocap:
            d.mocap_pos[:] = mocap
        mujoco.mj_forward(m, d)
        return m, d

    def _episode_ids(self):
        if self.state is None:
            raise RuntimeError("call reset(seed) first")
        i = jax.device_get({k: self.state.info[k] for k in ("key", "episode", "target")})
        return np.asarray(i["key"]), np.asarray(i["episode"]), np.asarray(i["target"])

    @property
    def params(self) -> dict:
        return _to_numpy(self.state.info["params"])


def _to_numpy(tree):
    return jax.tree_util.tree_map(np.asarray, jax.device_get(tree))
