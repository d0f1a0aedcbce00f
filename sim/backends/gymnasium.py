"""env.backend=gymnasium: a gymnasium env of yours as a batched env of the env interface (sim/interface.py).

    robot-rl-eval env.backend=gymnasium env.gym.id=MountainCarContinuous-v0 env.gym.success=terminated policy=expert

N copies run in one gymnasium vector env (gymnasium.make_vec, `env.gym.vectorization`) that resets a finished copy in
the same step, as our own backends do: the step that ends an episode returns the next episode's first observation and
the finished one's last in info["final_obs"].

Observations: a Dict space's Boxes become our keys (`env.gym.obs` maps our key -> theirs, "a/b" inside nested Dicts;
by default each Box under its own name, a flat Box as "state"), flattened to float32 [N, d]; uint8 Boxes [H, W, 3]
become camera images "images/<key>". Actions: a Box; our policies act in [-1, 1] on every dimension, mapped linearly
onto the env's bounds. Success: the info key `env.gym.success` (default is_success, else success) of the step, or
"terminated" (an episode that ends before its time limit succeeded). Ground-truth progress is unknown (NaN).
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Sequence

import numpy as np

from robot_rl.sim.actions import checked_actions
from robot_rl.sim.config import ConfigError, EnvConfig

SUCCESS_KEYS = ("is_success", "success")  # info keys read when env.gym.success is ""


class GymActionSpace:
    """Our side of a Box action space: actions in [-1, 1]^dim, mapped linearly onto the env's bounds."""

    kind = "gymnasium"

    def __init__(self, box):
        low, high = np.asarray(box.low, np.float64).reshape(-1), np.asarray(box.high, np.float64).reshape(-1)
        if not (np.isfinite(low).all() and np.isfinite(high).all()):
            raise ConfigError(f"the env's action space {box} is unbounded; robot_rl's policies act in [-1, 1] on "
                              "each dimension and need finite bounds to map them (wrap the env in "
                              "gymnasium.wrappers.RescaleAction or ClipAction)")
        self.shape, self.env_low, self.env_high, self.dim = box.shape, low, high, int(low.size)
        self.low = -np.ones(self.dim, np.float32)
        self.high = np.ones(self.dim, np.float32)

    @property
    def neutral(self) -> np.ndarray:
        """The middle of the env's bounds."""
        return np.zeros(self.dim, np.float32)

    def to_env(self, action: np.ndarray) -> np.ndarray:
        a = np.clip(action, -1.0, 1.0)
        out = self.env_low + 0.5 * (a + 1.0) * (self.env_high - self.env_low)
        return out.reshape((len(action),) + tuple(self.shape)).astype(np.float32)


def _boxes(space, prefix: str = "") -> dict:
    """{"a/b": Box} of every Box in a (nested) Dict space; {"": space} for a Box."""
    import gymnasium

    if isinstance(space, gymnasium.spaces.Box):
        return {prefix: space}
    if isinstance(space, gymnasium.spaces.Dict):
        out = {}
        for k, sub in space.spaces.items():
            out.update(_boxes(sub, f"{prefix}/{k}" if prefix else k))
        return out
    return {}


def _is_image(box) -> bool:
    return box.dtype == np.uint8 and len(box.shape) == 3 and box.shape[-1] == 3


def _get(obs, path: str):
    if path == "":
        return obs
    for part in path.split("/"):
        obs = obs[part]
    return obs


class GymnasiumEnv:
    """N copies of a gymnasium env behind the env interface (sim/interface.py)."""

    backend = "gymnasium"
    terminate_on_success = True  # episodes end where the env ends them
    action_history = 0
    instruction_names_goal = False  # one instruction for every episode (env.gym.instruction)

    def __init__(self, cfg: EnvConfig):
        import gymnasium

        self.cfg, g = cfg, cfg.gym
        for m in g.modules:
            try:
                importlib.import_module(m)
            except ImportError as e:
                raise ConfigError(f"env.gym.modules: {m!r} does not import ({e})") from None
        try:
            spec = gymnasium.spec(g.id)
        except gymnasium.error.Error:
            hint = f" (imported first: {', '.join(g.modules)})" if g.modules else ""
            raise ConfigError(f"env.gym.id={g.id!r}: gymnasium knows no such id{hint}; install the package that "
                              "registers it and name its module in env.gym.modules=[...]") from None
        self.task_name, self.num_envs = cfg.task_name, int(cfg.num_envs)
        self._vec = gymnasium.make_vec(
            g.id, num_envs=self.num_envs, vectorization_mode=g.vectorization,
            vector_kwargs={"autoreset_mode": gymnasium.vector.AutoresetMode.SAME_STEP},
            **{"render_mode": "rgb_array", **dict(g.kwargs)})
        try:
            self._setup(gymnasium, spec)
        except Exception:
            self._vec.close()
            raise

    def _setup(self, gymnasium, spec) -> None:
        g = self.cfg.gym
        act = self._vec.single_action_space
        if not isinstance(act, gymnasium.spaces.Box):
            raise ConfigError(f"env.gym.id={g.id!r} has action space {act}; robot_rl's policies output continuous "
                              "actions: only a Box action space is supported")
        self.action_space = GymActionSpace(act)
        self.action_dim = self.action_space.dim
        boxes = _boxes(self._vec.single_observation_space)
        if not boxes:
            raise ConfigError(f"env.gym.id={g.id!r}: its observation space {self._vec.single_observation_space} "
                              "has no Box; only Box and Dict-of-Box observations are supported")
        if g.obs:
            missing = {ours: theirs for ours, theirs in g.obs.items() if theirs not in boxes}
            if missing:
                ours, theirs = next(iter(missing.items()))
                raise ConfigError(f"env.gym.obs.{ours}={theirs!r}: the env has no such observation; its keys are "
                                  f"{', '.join(sorted(k or '<the whole Box>' for k in boxes))}")
            mapping = dict(g.obs)
        else:
            mapping = {(k or "state"): k for k in boxes}
        self._images = {f"images/{ours}": theirs for ours, theirs in mapping.items() if _is_image(boxes[theirs])}
        self._vectors = {ours: theirs for ours, theirs in mapping.items() if f"images/{ours}" not in self._images}
        self.cameras = tuple(k.split("/", 1)[1] for k in self._images)
        self._obs_dims = {k: int(np.prod(boxes[t].shape)) for k, t in self._vectors.items()}
        self._image_shapes = {k: tuple(int(x) for x in boxes[t].shape) for k, t in self._images.items()}
        made = self._vec.get_attr("spec")[0]  # as made (kwargs, an env factory that sets its own limit)
        self.episode_steps = int(getattr(made, "max_episode_steps", None) or spec.max_episode_steps or 0)  # 0: none
        self.control_hz = float(self._vec.metadata.get("render_fps") or self.cfg.control_hz)
        self._episode = np.zeros(self.num_envs, np.int64)
        self._seed = np.arange(self.num_envs, dtype=np.int64)
        if g.success != "terminated":  # one step from a reset: the success key is there, or say which keys are
            self._vec.reset(seed=0)
            _, _, _, _, info = self._vec.step(self.action_space.to_env(np.zeros((self.num_envs, self.action_dim))))
            final = info.get("final_info", {})
            keys = [g.success] if g.success else list(SUCCESS_KEYS)
            self._success_key = next((k for k in keys if k in info or k in final), None)
            if self._success_key is None:
                seen = sorted(k for k in set(info) | set(final) if not k.startswith("_")
                              and k not in ("final_obs", "final_info"))
                raise ConfigError(f"env.gym.success={g.success or 'is_success / success'}: {g.id}'s step info has "
                                  f"no such key (it sets: {', '.join(seen) or 'none'}); name one of them, or "
                                  "env.gym.success=terminated (an episode that ends before its time limit succeeded)")

    # ---- the env interface ------------------------------------------------------------------------------------
    robot = None  # a gymnasium env brings its own robot, not one of sim/robot.py's descriptions

    @property
    def obs_dims(self) -> dict[str, int]:
        return dict(self._obs_dims)

    @property
    def obs_fields(self) -> dict[str, dict[str, slice]]:
        return {}  # its observations have no named fields

    @property
    def image_shapes(self) -> dict[str, tuple[int, int, int]]:
        return dict(self._image_shapes)

    @property
    def instruction(self) -> list[str]:
        return self.instructions() * self.num_envs

    def instructions(self) -> list[str]:
        return [self.cfg.gym.instruction or self.task_name]

    @property
    def episode_ids(self) -> np.ndarray:
        return np.stack([self._seed, self._episode], axis=1)

    def config_dict(self) -> dict:
        return dataclasses.asdict(self.cfg)

    def _obs(self, raw, batch: tuple[int, ...] | None = None) -> dict:
        """Our observation dict of the env's `raw` observation: the batch's ([N, ...]), or with batch=() one env's."""
        lead = (self.num_envs,) if batch is None else batch
        out = {k: np.asarray(_get(raw, t), np.float32).reshape(*lead, -1) for k, t in self._vectors.items()}
        out.update({k: np.asarray(_get(raw, t), np.uint8) for k, t in self._images.items()})
        return out

    def reset(self, seed: int | Sequence[int] = 0) -> dict:
        if isinstance(seed, (int, np.integer)) and not isinstance(seed, bool):
            seeds = [int(seed) + i for i in range(self.num_envs)]
        else:
            seeds = [int(s) for s in seed]
            if len(seeds) != self.num_envs:
                raise ValueError(f"seed={seed!r} must be an int or a list of {self.num_envs} ints (one per env)")
        raw, _ = self._vec.reset(seed=seeds)
        self._seed, self._episode = np.asarray(seeds, np.int64), np.zeros(self.num_envs, np.int64)
        self._ret, self._len = np.zeros(self.num_envs, np.float32), np.zeros(self.num_envs, np.int64)
        return self._obs(raw)

    def step(self, action):
        a = checked_actions(action, self.num_envs, self.action_dim, self.task_name)
        raw, reward, terminated, truncated, info = self._vec.step(self.action_space.to_env(a))
        terminated, truncated = np.asarray(terminated, bool), np.asarray(truncated, bool)
        done = terminated | truncated
        success = self._success(info, terminated, truncated, done)
        reward = np.asarray(reward, np.float32)
        self._ret += reward
        self._len += 1
        ret, length = self._ret.copy(), self._len.copy()
        self._ret[done], self._len[done] = 0.0, 0
        obs = final = self._obs(raw)  # one dict while no episode ends, as on the MuJoCo C backend
        if done.any():
            final = {k: v.copy() for k, v in obs.items()}
            for i in np.nonzero(done)[0]:
                for k, v in self._obs(info["final_obs"][i], batch=()).items():
                    final[k][i] = v
            self._episode[done] += 1
        out = {"success": success, "terminated": terminated, "truncated": truncated, "final_obs": final,
               "episode_return": ret, "episode_length": length,
               "progress": np.full(self.num_envs, np.nan, np.float32), "intervention": np.zeros(self.num_envs, bool)}
        return obs, reward, done, out

    def _success(self, info: dict, terminated, truncated, done) -> np.ndarray:
        if self.cfg.gym.success == "terminated":
            return terminated & ~truncated
        key, out = self._success_key, np.zeros(self.num_envs, bool)
        if key in info:  # the envs still running, or all of them where the env reports every step
            mask = np.asarray(info.get(f"_{key}", np.ones(self.num_envs, bool)), bool)
            out[mask] = np.asarray(info[key], dtype=bool)[mask]
        final = info.get("final_info", {})
        if key in final:  # the finished episodes' last step
            mask = np.asarray(final.get(f"_{key}", done), bool) & done
            out[mask] = np.asarray(final[key], dtype=bool)[mask]
        return out

    def end_episodes(self, env_ids) -> dict:
        """End envs `env_ids`' episodes now and start their next ones; their first obs."""
        idx = np.asarray(env_ids, np.int64).reshape(-1)
        mask = np.zeros(self.num_envs, bool)
        mask[idx] = True
        raw, _ = self._vec.reset(options={"reset_mask": mask})
        self._episode[mask] += 1
        self._ret[mask], self._len[mask] = 0.0, 0
        return {k: v[idx] for k, v in self._obs(raw).items()}

    def render(self, env_ids, camera: str = "", width: int = 320, height: int = 240,
               quality: str = "high") -> np.ndarray:
        """The envs' frames as the env renders them (render_mode rgb_array; its own size)."""
        import gymnasium

        from robot_rl.sim.render import RenderingUnavailable

        try:
            frames = self._vec.render()
        except gymnasium.error.Error as e:  # e.g. a renderer dependency the env's package leaves optional
            raise RenderingUnavailable(f"{self.task_name} cannot render ({e}); install what it names, or record no "
                                       "videos (videos=0)") from None
        return np.stack([np.asarray(frames[int(i)], np.uint8) for i in np.atleast_1d(env_ids)])

    def close(self) -> None:
        self._vec.close()
