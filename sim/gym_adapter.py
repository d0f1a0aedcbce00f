"""Gymnasium adapters: `RobotRLVectorEnv` (a VectorEnv over a BatchedEnv) and `RobotRLEnv` (one env).

    import gymnasium, sim.gym_adapter                    # importing the adapter registers robot_rl/<Task>-v0
    env = gymnasium.make("robot_rl/Lift-v0", render_mode="rgb_array")
    envs = gymnasium.make_vec("robot_rl/Lift-v0", num_envs=16)      # one RobotRLVectorEnv, next-step autoreset
    gymnasium.make("robot_rl.sim.gym_adapter:robot_rl/Push-v0")  # without importing it first

Every task of sim.TASKS is registered (`lift` -> `robot_rl/Lift-v0`, `peg_insert` -> `robot_rl/PegInsert-v0`) with
max_episode_steps = the task's episode_steps; keyword arguments go to sim.make (cameras, image_size,
task_config, randomization, backend, ...). The episode length is the task's `episode_steps`: make_vec's
max_episode_steps sets it; for gymnasium.make give task_config={"episode_steps": n} with max_episode_steps=n.

The vector env resets finished envs in one of gymnasium's two autoreset modes (https://farama.org/Vector-Autoreset-Mode):
- NEXT_STEP (default, as gymnasium's own vector envs): the step that ends an episode returns its last obs; the
  env's next step ignores its action and returns the new episode's first obs, reward 0, not terminated or
  truncated. gymnasium's observation wrappers (FlattenObservation, NormalizeObservation, ...) need this mode.
- SAME_STEP: the step that ends an episode already returns the new episode's first obs; info carries "final_obs"
  (object array of per-env obs dicts, None elsewhere) and "final_info" (batched info dict), each with a
  "_final_obs" / "_final_info" mask. This is what the BatchedEnv does itself, without the extra step.

render_mode="rgb_array" renders `render_camera` (sim/render.py, quality "high") of the env's current state; the
batched env resets inside the step that ends an episode, so the frame after that step already shows the next
episode's first state (the returned obs are exact in both modes).
"""

from __future__ import annotations

from typing import Any

import gymnasium
import numpy as np
from gymnasium import spaces
from gymnasium.utils import seeding
from gymnasium.vector import AutoresetMode
from gymnasium.vector.utils import batch_space

from robot_rl import sim
from robot_rl.sim.env import BatchedEnv

_INFO_KEYS = ("success", "progress", "intervention", "episode_return", "episode_length")
_SEED_LIMIT = 2**31
AUTORESET_MODES = (AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP)
RENDER_MODES = ["rgb_array"]


def observation_space(env: BatchedEnv) -> spaces.Dict:
    """Dict of unbounded float32 Boxes, one per vector observation key of `env`, and uint8 image Boxes."""
    boxes = {k: spaces.Box(-np.inf, np.inf, (int(d),), np.float32) for k, d in env.obs_dims.items()}
    boxes.update({k: spaces.Box(0, 255, shape, np.uint8) for k, shape in env.image_shapes.items()})
    return spaces.Dict(dict(sorted(boxes.items())))


def action_space(env: BatchedEnv) -> spaces.Box:
    """Normalized action Box [-1, 1]^action_dim."""
    return spaces.Box(-1.0, 1.0, (env.action_dim,), np.float32)


def _next_seed(np_random: np.random.Generator) -> int:
    """A fresh BatchedEnv seed drawn from a gymnasium RNG."""
    return int(np_random.integers(_SEED_LIMIT))


def _check_render_mode(render_mode: str | None) -> None:
    if render_mode is not None and render_mode not in RENDER_MODES:
        raise ValueError(f"render_mode={render_mode!r}; valid: None, {', '.join(map(repr, RENDER_MODES))}")


class _Rendering:
    """render_mode / metadata / render() shared by the single and the vector env."""

    env: BatchedEnv

    def _init_rendering(self, render_mode, camera: str, width: int, height: int, **metadata) -> None:
        _check_render_mode(render_mode)
        self.render_mode = render_mode
        self.render_camera, self.render_width, self.render_height = camera, int(width), int(height)
        if render_mode is not None:
            from robot_rl.sim.render import check_cameras

            check_cameras(self.env.model, [camera])  # a wrong name fails now, not at the first frame
        self.metadata = {**metadata, "render_modes": list(RENDER_MODES), "render_fps": float(self.env.control_hz)}

    def _frames(self, env_ids) -> np.ndarray:
        return self.env.render(env_ids, self.render_camera, self.render_width, self.render_height)


class RobotRLVectorEnv(_Rendering, gymnasium.vector.VectorEnv):
    """A gymnasium VectorEnv view of a BatchedEnv (next-step or same-step autoreset, see the module docstring)."""

    def __init__(self, env: BatchedEnv, autoreset_mode: AutoresetMode | str = AutoresetMode.NEXT_STEP,
                 render_mode: str | None = None, render_camera: str = "overview", render_width: int = 320,
                 render_height: int = 240):
        try:
            mode = AutoresetMode(autoreset_mode)
        except ValueError:
            mode = None
        if mode not in AUTORESET_MODES:
            raise ValueError(f"autoreset_mode={autoreset_mode!r}; valid: "
                             + ", ".join(f"AutoresetMode.{m.name} ({m.value!r})" for m in AUTORESET_MODES))
        self.env = env
        self.autoreset_mode = mode
        self.num_envs = env.num_envs
        self.single_observation_space = observation_space(env)
        self.single_action_space = action_space(env)
        self.observation_space = batch_space(self.single_observation_space, self.num_envs)
        self.action_space = batch_space(self.single_action_space, self.num_envs)
        self._init_rendering(render_mode, render_camera, render_width, render_height, autoreset_mode=mode)
        self._autoreset = np.zeros(self.num_envs, dtype=bool)  # NEXT_STEP: envs whose episode ended last step

    def reset(self, *, seed: int | list[int | None] | None = None, options: dict[str, Any] | None = None):
        """Reset every env. seed: an int for the batch, a list of one per env (None entries drawn), or None (drawn
        from the vector env's np_random)."""
        if seed is None or isinstance(seed, (int, np.integer)):
            super().reset(seed=seed)
            keys_seed = seed if seed is not None else _next_seed(self.np_random)
        else:
            seeds = list(seed) if isinstance(seed, (list, tuple)) else None
            if (seeds is None or len(seeds) != self.num_envs
                    or not all(s is None or isinstance(s, (int, np.integer)) for s in seeds)):
                raise ValueError(f"seed={seed!r} must be an int, None or a list of {self.num_envs} seeds (one per env)")
            if all(s is not None for s in seeds):  # later unseeded resets follow from the list
                self._np_random, self._np_random_seed = seeding.np_random(
                    int(np.random.SeedSequence([int(s) for s in seeds]).generate_state(1)[0]))
            keys_seed = [int(s) if s is not None else _next_seed(self.np_random) for s in seeds]
        obs = self.env.reset(keys_seed)
        self._autoreset[:] = False
        return obs, {}

    def step(self, actions):
        """Step all envs; terminated / truncated split; finished envs reset per `autoreset_mode`."""
        obs, reward, done, raw = self.env.step(actions)
        terminated, truncated = np.asarray(raw["terminated"]).copy(), np.asarray(raw["truncated"]).copy()
        info = {}
        for k in _INFO_KEYS:
            info[k], info[f"_{k}"] = np.asarray(raw[k]).copy(), np.ones(self.num_envs, dtype=bool)
        if self.autoreset_mode == AutoresetMode.SAME_STEP:
            if done.any():
                info.update(self._final(raw, done))
            return obs, reward, terminated, truncated, info
        ended = done & ~self._autoreset
        restart = np.nonzero(self._autoreset)[0]
        if ended.any() or len(restart):  # edited below: copies, not the batched env's arrays
            obs, reward = {k: v.copy() for k, v in obs.items()}, reward.copy()
        if ended.any():  # the episode's last obs; the batched env already holds the next one
            for k in obs:
                obs[k][ended] = raw["final_obs"][k][ended]
        if len(restart):
            # These envs ended last step: the step they just took belongs to no episode, so they go back to the
            # first state of the episode auto-reset gave them. (An episode that ends on its first step, e.g.
            # episode_steps=1, has moved on to the one after: its start is returned instead.)
            for k, v in self.env.restart(restart).items():
                obs[k][restart] = v
            reward[restart] = 0.0
            terminated[restart] = truncated[restart] = False
            for k in _INFO_KEYS:
                info[k][restart] = 0
                info[f"_{k}"][restart] = False
        self._autoreset = ended
        return obs, reward, terminated, truncated, info

    def _final(self, raw: dict, done: np.ndarray) -> dict:
        """Same-step autoreset's final_obs / final_info entries."""
        final_obs = np.full(self.num_envs, None, dtype=object)
        for i in np.nonzero(done)[0]:
            final_obs[i] = {k: v[i].copy() for k, v in raw["final_obs"].items()}
        final_info = {}
        for k in _INFO_KEYS:
            final_info[k], final_info[f"_{k}"] = np.asarray(raw[k]).copy(), done.copy()
        return {"final_obs": final_obs, "_final_obs": done.copy(), "final_info": final_info,
                "_final_info": done.copy()}

    def render(self) -> tuple[np.ndarray, ...] | None:
        """One RGB frame [H, W, 3] uint8 per env (render_mode="rgb_array"), else None."""
        if self.render_mode is None:
            return None
        return tuple(self._frames(np.arange(self.num_envs)))

    def close_extras(self, **kwargs) -> None:
        """Release the backend."""
        self.env.close()


class RobotRLEnv(_Rendering, gymnasium.Env):
    """A single-env gymnasium view of a BatchedEnv with num_envs=1."""

    def __init__(self, env: BatchedEnv, render_mode: str | None = None, render_camera: str = "overview",
                 render_width: int = 320, render_height: int = 240):
        if env.num_envs != 1:
            raise ValueError(f"RobotRLEnv needs a BatchedEnv with num_envs=1, got {env.num_envs}")
        self.env = env
        self.observation_space = observation_space(env)
        self.action_space = action_space(env)
        self._init_rendering(render_mode, render_camera, render_width, render_height)
        self._needs_reset = True

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        """Start a new episode; seed=None draws the next seed from self.np_random."""
        super().reset(seed=seed)
        obs = self.env.reset(seed if seed is not None else _next_seed(self.np_random))
        self._needs_reset = False
        return self._unbatch(obs), {}

    def step(self, action):
        """One control step; at episode end the returned obs is the episode's final obs."""
        if self._needs_reset:
            raise RuntimeError("call reset() before step() (and again after an episode ends)")
        a = np.asarray(action, dtype=np.float32)
        if a.shape != self.action_space.shape:
            raise ValueError(f"action has shape {a.shape}, expected {self.action_space.shape}")
        obs, reward, done, raw = self.env.step(a[None])
        terminated, truncated = bool(raw["terminated"][0]), bool(raw["truncated"][0])
        if done[0]:
            obs = raw["final_obs"]
            self._needs_reset = True
        info = {k: np.asarray(raw[k][0]).item() for k in _INFO_KEYS}
        return self._unbatch(obs), float(reward[0]), terminated, truncated, info

    def _unbatch(self, obs: dict) -> dict:
        """Env 0's observation as fresh arrays of the space's dtypes (float32 vectors, uint8 images)."""
        return {k: np.array(v[0], dtype=self.observation_space[k].dtype) for k, v in sorted(obs.items())}

    def render(self) -> np.ndarray | None:
        """An RGB frame [H, W, 3] uint8 (render_mode="rgb_array"), else None."""
        return None if self.render_mode is None else self._frames([0])[0]

    def close(self) -> None:
        """Release the backend."""
        self.env.close()


def _episode_overrides(max_episode_steps: int | None, env_overrides: dict) -> dict:
    """env_overrides with task_config.episode_steps = max_episode_steps (gymnasium's name for it) when given."""
    if max_episode_steps is None:
        return env_overrides
    task_config = dict(env_overrides.get("task_config") or {})
    if task_config.get("episode_steps", max_episode_steps) != max_episode_steps:
        raise ValueError(f"max_episode_steps={max_episode_steps} and task_config.episode_steps="
                         f"{task_config['episode_steps']} disagree; give one of them")
    return {**env_overrides, "task_config": {**task_config, "episode_steps": int(max_episode_steps)}}


def make_gym_env(task: str = "lift", render_mode: str | None = None, render_camera: str = "overview",
                 render_width: int = 320, render_height: int = 240, max_episode_steps: int | None = None,
                 **env_overrides) -> RobotRLEnv:
    """A single gymnasium env for `task` (overrides as for sim.make; max_episode_steps sets the episode length)."""
    _check_render_mode(render_mode)
    env = sim.make(task, num_envs=1, **_episode_overrides(max_episode_steps, env_overrides))
    return RobotRLEnv(env, render_mode, render_camera, render_width, render_height)


def make_gym_vector_env(task: str = "lift", num_envs: int = 16,
                        autoreset_mode: AutoresetMode | str = AutoresetMode.NEXT_STEP, render_mode: str | None = None,
                        render_camera: str = "overview", render_width: int = 320, render_height: int = 240,
                        max_episode_steps: int | None = None, **env_overrides) -> RobotRLVectorEnv:
    """A gymnasium vector env of `num_envs` copies of `task` (overrides as for sim.make; max_episode_steps sets the
    episode length)."""
    _check_render_mode(render_mode)
    env = sim.make(task, num_envs=num_envs, **_episode_overrides(max_episode_steps, env_overrides))
    return RobotRLVectorEnv(env, autoreset_mode, render_mode, render_camera, render_width, render_height)


def gym_id(task: str) -> str:
    """The gymnasium id of a sim task: lift -> robot_rl/Lift-v0, peg_insert -> robot_rl/PegInsert-v0."""
    return "robot_rl/" + "".join(part.capitalize() for part in task.split("_")) + "-v0"


def register_tasks() -> list[str]:
    """Register every task of sim.TASKS with gymnasium (ids from gym_id); the ids."""
    ids = []
    for task, cls in sorted(sim.TASKS.items()):
        ids.append(gym_id(task))
        if ids[-1] in gymnasium.registry:
            continue
        gymnasium.register(ids[-1], entry_point=f"{__name__}:make_gym_env",
                           vector_entry_point=f"{__name__}:make_gym_vector_env",
                           max_episode_steps=cls.config_cls().episode_steps, kwargs={"task": task})
    return ids


register_tasks()
