"""BatchedEnv: our two backends' shared host side of the env interface (sim/interface.py lists what the layers above
may use); sim/make.py builds one from an EnvConfig. In detail, for these backends:

Host API (both backends, numpy in / numpy out):
  reset(seed) -> obs                      seed: an int, or one int per env (env i then starts as a one-env
                                          batch reset with seed[i] does)
                                          obs: dict of float32 arrays [N, dim] (`obs_dims`), plus
                                          "images/<camera>" uint8 [N, H, W, 3] per configured camera
                                          (`image_shapes`; none unless EnvConfig.cameras is set)
  step(action [N, A]) -> obs, reward [N], done [N], info
  restart(env_ids) -> obs of env_ids      those envs back at the first state of their current episode (what
                                          reset / auto-reset gave them); the others untouched
  end_episodes(env_ids) -> obs of env_ids those envs' episodes end now and their next ones start (as auto-reset
                                          would give them); for ends the env cannot see (a learned success
                                          detector, an operator)
  instruction -> list[str]                each env's current episode's instruction (drawn from the seed)
Auto-reset happens inside step: where done, `obs` is already the next episode's first observation (images
too) and `info["final_obs"]` holds the last observation of the finished episode. info also carries `success`,
`progress`, `intervention` (always False from sim; the HIL layer sets it), `terminated`, `truncated`,
`episode_return` and `episode_length` (meaningful where done).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

from robot_rl.sim.config import ConfigError, EnvConfig
from robot_rl.sim.tasks import TASKS


class BatchedEnv:
    """The env interface (sim/interface.py) of both backends: shared host-side logic. Subclasses implement
    `_reset(keys)`, `_step(action)` and `_restart(idx, advance)`."""

    def __init__(self, cfg: EnvConfig):
        from robot_rl.sim.actions import ActionHistory, ActionSpace
        from robot_rl.sim.randomization import check_task_support

        cfg.validate(TASKS)
        task_cls = TASKS[cfg.task]
        known = {f.name for f in dataclasses.fields(task_cls.config_cls)}
        unknown = sorted(set(cfg.task_config) - known)
        if unknown:
            raise ConfigError(f"unknown task_config key(s) {unknown} for task {cfg.task!r}; valid: {sorted(known)}")
        try:
            task_cfg = task_cls.config_cls(**{k: _tuplify(v) for k, v in cfg.task_config.items()})
            self.task = task_cls(task_cfg, cfg.robot)
        except ValueError as e:
            raise ConfigError(str(e)) from None
        check_task_support(cfg.randomization, self.task)
        self.cfg = cfg
        self.num_envs = int(cfg.num_envs)
        self.action_space = ActionSpace(cfg, self.task)
        self.action_dim = self.action_space.dim
        self.cameras: tuple[str, ...] = tuple(cfg.cameras)
        self._actions = ActionHistory(self.num_envs, cfg.action_history, self.action_space.neutral)
        self._image_renderer = None

    def _init_visuals(self, model) -> None:
        """Visual fields of the compiled model; with cameras, check their names and open the GL context now,
        so a wrong name or missing GL fails at construction, before any simulation."""
        import mujoco

        from robot_rl.sim.randomization import VisualFields
        from robot_rl.sim.render import FrameRenderer, check_cameras

        self.visual = VisualFields(model, self.task, self.cfg.randomization)
        if self.cameras:
            check_cameras(model, self.cameras)
            h, w = self.cfg.image_size
            self._image_renderer = FrameRenderer(width=w, height=h, quality=self.cfg.image_quality)
            self._image_renderer.context(model)
            self._image_data = mujoco.MjData(model)

    def _visual_draws(self, key, episode) -> dict:
        """Visual randomization draws [len(key), ...] of episodes (key, episode), host side."""
        from robot_rl.sim.randomization import sample_visuals

        return sample_visuals(self.cfg.randomization, key, episode, *self.visual.counts)

    def _render_images(self, models, qpos, mocap_pos, env_ids) -> dict:
        return self._image_renderer.render_images(self.cameras, models, self._image_data, qpos, mocap_pos, env_ids)

    # ---- host API ---------------------------------------------------------------------------------
    def reset(self, seed: int | Sequence[int] = 0) -> dict:
        obs = self._reset(self.env_keys(seed))
        self._actions.reset()
        return self._actions.add_to(obs)

    def env_keys(self, seed: int | Sequence[int]) -> np.ndarray:
        """Per-env stream keys uint32 [N] of `seed`: an int for the batch, or one int per env."""
        from robot_rl.sim import rng

        if isinstance(seed, (int, np.integer)) and not isinstance(seed, bool):
            return rng.env_key(np, int(seed), np.arange(self.num_envs))
        seeds = list(seed) if isinstance(seed, (list, tuple, np.ndarray)) else None
        if (seeds is None or len(seeds) != self.num_envs
                or not all(isinstance(s, (int, np.integer)) and not isinstance(s, bool) for s in seeds)):
            raise ValueError(f"seed={seed!r} must be an int or a list of {self.num_envs} ints (one per env)")
        return np.concatenate([rng.env_key(np, int(s), np.arange(1)) for s in seeds])

    def restart(self, env_ids) -> dict:
        """Put envs `env_ids` back at the first state of their current episode; their obs [len(env_ids), ...].

        The episode, its draws and its observation noise are those reset / auto-reset gave the env, so the obs
        equals the one it started the episode with. Gymnasium's next-step autoreset (sim/gym_adapter.py) uses it
        to undo the step a just-reset env must not take."""
        return self._start(env_ids, advance=False)

    def end_episodes(self, env_ids) -> dict:
        """End envs `env_ids`' current episodes now and start their next ones, as auto-reset does after a done;
        their first obs [len(env_ids), ...]. For what the env cannot see: a learned success detector, or an
        operator, saying an episode is over (a robot then resets too)."""
        return self._start(env_ids, advance=True)

    def _start(self, env_ids, advance: bool) -> dict:
        idx = np.asarray(env_ids, dtype=np.int64).reshape(-1)
        if idx.size and (idx.min() < 0 or idx.max() >= self.num_envs):
            raise ValueError(f"env_ids {idx.tolist()} out of range for num_envs={self.num_envs}")
        obs = self._restart(idx, advance)
        self._actions.reset(idx)
        return self._actions.add_to(obs, idx)

    def _restart(self, idx: np.ndarray, advance: bool = False) -> dict:
        """Envs idx at the first state of their current episode (advance=False) or of their next one (True)."""
        raise NotImplementedError

    def phys(self):
        """The envs' current physics state (sim.task.Phys of host arrays [N, ...]), as the next step starts from."""
        raise NotImplementedError

    def step(self, action):
        action = self.check_action(action)
        obs, reward, done, info = self._step(action)
        if self.cfg.action_history:  # the finished episodes' last observation keeps its history, the next starts anew
            self._actions.push(action)
            self._actions.add_to(info["final_obs"])
            self._actions.reset(np.nonzero(done)[0])
            self._actions.add_to(obs)  # obs and final_obs are separate dicts on MJX (one on MuJoCo C)
        return obs, reward, done, info

    def check_action(self, action) -> np.ndarray:
        from robot_rl.sim.actions import checked_actions

        return checked_actions(action, self.num_envs, self.action_dim,
                               f"action_space={self.cfg.action_space!r} on task {self.task.name!r}")

    # ---- the env interface's reads of the config (sim/interface.py: nothing above sim reads env.cfg) ----------------
    @property
    def task_name(self) -> str:
        return self.cfg.task

    @property
    def robot(self) -> str:
        return self.cfg.robot

    @property
    def obs_fields(self) -> dict[str, dict[str, slice]]:
        return self.task.obs_fields()

    @property
    def control_hz(self) -> float:
        return float(self.cfg.control_hz)

    @property
    def action_history(self) -> int:
        return int(self.cfg.action_history)

    @property
    def terminate_on_success(self) -> bool:
        return bool(self.cfg.terminate_on_success)

    @property
    def backend(self) -> str:
        return self.cfg.backend

    @property
    def instruction_names_goal(self) -> bool:
        """The instruction says which goal an episode has (the task overrides Task.instruction, as color_lift does);
        single-goal tasks draw paraphrases of one goal, which a reward model need not read."""
        from robot_rl.sim.task import Task

        return type(self.task).instruction is not Task.instruction

    def config_dict(self) -> dict:
        """The settings that build this env again in another process: sim.make_from_config(sim.env_config(d))."""
        return dataclasses.asdict(self.cfg)

    @property
    def obs_dims(self) -> dict[str, int]:
        """Sizes of the vector observation keys (images are in `image_shapes`)."""
        return self._actions.add_dims(self.task.obs_dims())

    @property
    def image_shapes(self) -> dict[str, tuple[int, int, int]]:
        """{"images/<camera>": (H, W, 3)} of the image observations (uint8); {} without cameras."""
        h, w = self.cfg.image_size
        return {f"images/{c}": (h, w, 3) for c in self.cameras}

    def instructions(self) -> list[str]:
        """Every instruction the task gives; `instruction` is each env's current one."""
        return self.task.instructions()

    @property
    def instruction(self) -> list[str]:
        """Each env's current-episode instruction (len num_envs), drawn per episode from the reset seed."""
        from robot_rl.sim import rng

        key, episode, target = self._episode_ids()
        u = rng.uniform(np, key, episode, rng.INSTRUCTION, 1)[:, 0]
        return [self.task.instruction(t, float(x)) for t, x in zip(target, u)]

    @property
    def goals(self) -> list[str | None]:
        """Each env's current-episode goal (Task.goal: e.g. "red cube" on color_lift; None for single-goal tasks)."""
        return [self.task.goal(t) for t in self._episode_ids()[2]]

    @property
    def task_target(self) -> np.ndarray:
        """Each env's current-episode task vector [N, target_dim] (goal, hole, named cube, ...): privileged
        state for scripted experts, not an observation."""
        return np.asarray(self._episode_ids()[2], dtype=np.float32)

    @property
    def episode_ids(self) -> np.ndarray:
        """[N, 2] int64 (env key, episode index) of each env's current episode: changes exactly where an env
        starts a new episode (reset or auto-reset), as a policy's reset(env_ids) would tell it."""
        key, episode, _ = self._episode_ids()
        return np.stack([np.asarray(key, np.int64), np.asarray(episode, np.int64)], axis=1)

    def _episode_ids(self):
        """(key uint32 [N], episode uint32 [N], target [N, target_dim]) of the envs' current episodes."""
        raise NotImplementedError

    @property
    def episode_steps(self) -> int:
        return self.task.cfg.episode_steps

    def render(self, env_ids, camera: str = "front", width: int = 320, height: int = 240,
               quality: str = "high") -> np.ndarray:
        """RGB frames [len(env_ids), height, width, 3] uint8 of the envs' current states, offscreen (videos).

        quality "high" draws shadows, reflections and anti-aliasing; "fast" draws as image observations do."""
        from robot_rl.sim.render import FrameRenderer

        r = getattr(self, "_frame_renderer", None)
        if r is None or (r.width, r.height, r.quality) != (width, height, quality):
            if r is not None:
                r.close()
            r = self._frame_renderer = FrameRenderer(width, height, quality)
        return np.stack([r.render(*self._render_state(int(i)), camera) for i in np.atleast_1d(env_ids)])

    def _render_state(self, i: int):
        """(MjModel, MjData) holding env i's current state, for rendering."""
        raise NotImplementedError

    def close(self) -> None:
        for name in ("_frame_renderer", "_image_renderer"):
            r = getattr(self, name, None)
            if r is not None:
                r.close()
                setattr(self, name, None)


def _tuplify(v):
    return tuple(v) if isinstance(v, list) else v
