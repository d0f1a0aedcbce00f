"""Scripted experts: batched feedback controllers over observations, one per task.

They read only the observation dict (so observation noise affects them as it would a policy) and emit
ee_delta actions (in a joint_pos env: the joint targets the env's IK step makes of them). `noise` is the std of
Gaussian noise added to every action entry (then clipped): the sub-optimality knob for collecting imperfect
demonstrations. noise=0 is the reference expert.

They work on a robot's terms (randomization=sim2real: millimetres of observation noise, 0-2 control ticks
of action latency): decisions read per-env estimates that average the readings of the current episode
(`smooth`), a phase switches only after its condition held for a few ticks (`ticks`), and small
corrections are commanded at a fraction of the error per tick, so delayed actions do not overshoot. The
only things they know besides the observation and the task's and robot's constants are when each env's
episode starts (`env.episode_ids`: what a policy learns from `reset(env_ids)`) and, for color_lift, which
cube is named.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from robot_rl.sim.actions import ActionSpace
from robot_rl.sim.env import BatchedEnv
from robot_rl.sim.registry import Registry, load_object


class Expert:
    """Base of the task experts: `act(obs) -> [N, A]` = clean_action(obs) + noise, with per-env estimates,
    tick counters and state (`smooth`, `ticks`, `state`) that restart with each env's episode.

    Memory needs consecutive observations of the env's own episodes. Observations of another batch size (e.g.
    stored steps relabeled in batches) are planned from alone, as on an episode's first tick with every
    confirmation given, and leave the memory untouched. An episode starts where `env.episode_ids` changes (the
    env's reset or auto-reset), where `reset(env_ids)` says so, or where the hand jumped farther than it can
    move in a tick (observations from elsewhere, e.g. a robot whose scene was reset)."""

    jump = 0.06  # m the observed hand moves between two ticks that says a new episode began (a tick: <= 2 cm)

    def __init__(self, env: BatchedEnv, noise: float = 0.0, seed: int = 0):
        if env.cfg.action_space not in ("ee_delta", "joint_pos"):
            raise ValueError(
                f"scripted experts act in ee_delta or joint_pos; the env uses action_space={env.cfg.action_space!r}"
            )
        # In a joint_pos env the expert plans the same ee_delta moves and hands over the joint targets the env's
        # own IK step gives them from the current state (the same motion, as absolute joint targets: demonstrations
        # for joint-space policies). Under action latency the IK step runs when the action is chosen, not when it
        # is executed.
        self._ee_space = None
        if env.cfg.action_space == "joint_pos":
            self._ee_space = ActionSpace(dataclasses.replace(env.cfg, action_space="ee_delta"), env.task)
        if noise < 0:
            raise ValueError(f"expert noise={noise} must be >= 0")
        self.env = env
        self.noise = float(noise)
        self.max_delta = env.cfg.max_ee_delta
        self.max_yaw = env.cfg.max_yaw_delta
        self.use_yaw = env.action_space.use_yaw
        self.tcfg = env.task.cfg
        self.rng = np.random.default_rng(seed)
        self._memory: dict = {}  # name -> Estimate or per-env array, of the envs' current episodes
        self._episodes = None  # [N, 2] (env key, episode index) the memory belongs to
        self._forget = np.zeros(env.num_envs, dtype=bool)  # reset(env_ids) since the last act
        self._confirmed = False  # planning without memory: every `ticks` confirmation is given
        self.fresh = np.ones(env.num_envs, dtype=bool)  # per env: this act() is its episode's first
        # per env, the fraction of the last action's motion noise the next action takes back (see act)
        self.cancel_noise = np.zeros(env.num_envs)

    def reset(self, env_ids=None) -> None:
        """Forget what env_ids (all when None) remember; new episodes are also noticed without this call."""
        self._forget[slice(None) if env_ids is None else np.asarray(env_ids, dtype=np.int64)] = True

    def act(self, obs: dict) -> np.ndarray:
        batch = len(obs["proprio"])
        if batch != self.env.num_envs:
            if self._ee_space is not None:
                raise ValueError(f"a joint_pos expert acts on its env's own {self.env.num_envs} observations (its "
                                 f"IK step reads the env's state), not on a batch of {batch}")
            return self._act_without_memory(obs, batch)
        self.fresh = self._new_episodes(obs)
        a = self._act(obs)
        if self._ee_space is None:
            return a
        ctrl = self._ee_space.to_ctrl(np, a.astype(np.float64), self.env.phys())
        return self.env.action_space.joint_pos_action(np, ctrl).astype(np.float32)

    def _act(self, obs: dict) -> np.ndarray:
        a = self.clean_action(obs)
        last_noise = self.state("noise", a.shape[1:])  # the last action's noise
        if self.noise > 0:
            n = self.noise * self.rng.standard_normal(a.shape).astype(np.float32)
            # An expert whose corrections are far slower than its noise (it averages noisy readings) would let
            # the noise pile up into a random walk of the hand: it knows the noise it added, so it undoes (a
            # `cancel_noise` fraction of) the last one's motion, not the grip's, as an operator corrects a slip.
            a = a + n
            a[:, :-1] -= self.cancel_noise[:, None] * last_noise[:, :-1]
            last_noise[:] = n
        a = np.clip(a, -1.0, 1.0).astype(np.float32)
        self.state("last_move", (3,))[:] = a[:, :3] * self.max_delta
        return a

    def _act_without_memory(self, obs: dict, batch: int) -> np.ndarray:
        saved = self._memory, self.fresh, self.cancel_noise, self._confirmed
        self._memory, self.fresh, self.cancel_noise, self._confirmed = {}, np.ones(batch, bool), np.zeros(batch), True
        try:
            return self._act(obs)
        finally:
            self._memory, self.fresh, self.cancel_noise, self._confirmed = saved

    def _new_episodes(self, obs: dict) -> np.ndarray:
        fresh = self._forget.copy()
        self._forget[:] = False
        try:
            ids = self.env.episode_ids
        except RuntimeError:  # an env never reset (observations come from elsewhere)
            ids = None
        if ids is not None:
            fresh |= np.ones(len(ids), bool) if self._episodes is None else (ids != self._episodes).any(axis=1)
            self._episodes = ids
        hand = self.ee_pos(obs)
        last = self._memory.get("hand")
        fresh |= np.ones(len(hand), bool) if last is None else np.linalg.norm(hand - last, axis=1) > self.jump
        self._memory["hand"] = hand
        return fresh

    # ---- observation fields, by name (Task.obs_fields): the same code on every robot -------------------------------
    def obs(self, obs: dict, key: str, name: str) -> np.ndarray:
        """Field `name` of obs[key] [N, n] as float64 (e.g. obs(o, "object", "minus_ee"))."""
        return np.asarray(self.env.task.field(obs, key, name), dtype=np.float64)

    def ee_pos(self, obs: dict) -> np.ndarray:
        """[N, 3] m, the grip site."""
        return self.obs(obs, "proprio", "ee_pos")

    def gripper_width(self, obs: dict) -> np.ndarray:
        """[N] m between the finger pads."""
        return self.obs(obs, "proprio", "gripper_width")[:, 0]

    def ee_yaw(self, obs: dict) -> np.ndarray:
        """[N] rad, the gripper's yaw."""
        cs = self.env.task.field(obs, "proprio", "ee_yaw")
        return np.arctan2(cs[:, 1], cs[:, 0]).astype(np.float64)

    @property
    def last_move(self) -> np.ndarray:
        """[N, 3] m, the hand displacement the last action asked for (0 on an episode's first tick)."""
        return self.state("last_move", (3,))

    def clean_action(self, obs: dict) -> np.ndarray:
        raise NotImplementedError

    # helpers -------------------------------------------------------------------------------------
    def smooth(self, name: str, reading: np.ndarray, gain, shift=None, restart=None) -> np.ndarray:
        """Per-env estimate [N, ...] of a noisy `reading` [N, ...] (see Estimate), restarted at each episode's
        start and where `restart` [N] is True."""
        est = self._memory.get(name)
        if est is None:
            est = self._memory[name] = Estimate(gain)
        est.gain = gain
        fresh = self.fresh if restart is None else self.fresh | restart
        return est.update(np.asarray(reading, np.float64), fresh, shift)

    def state(self, name: str, shape: tuple = ()) -> np.ndarray:
        """Per-env state [N, *shape] the expert keeps (and changes in place), zeroed at each episode's start."""
        v = self._memory.get(name)
        if v is None or v.shape != (len(self.fresh), *shape):
            v = self._memory[name] = np.zeros((len(self.fresh), *shape))
        v[self.fresh] = 0.0
        return v

    def reading_noise(self, name: str, static_reading: np.ndarray, still: np.ndarray | None = None) -> np.ndarray:
        """Per env: the std [N] of this episode's readings [N, D] of a quantity that stays put (a fixture's position;
        an object's while nothing touches it: `still` [N] says on which ticks, default every one): how much the
        observations jitter (0 on exact observations, and before any still tick)."""
        r = np.asarray(static_reading, np.float64)
        stats = self.state(name + "/stats", (3, r.shape[1]))  # per env: count, sum, sum of squares
        on = np.ones(len(r), bool) if still is None else np.asarray(still, bool)
        stats[on] += np.stack([np.ones_like(r[on]), r[on], r[on] * r[on]], axis=1)
        n = np.maximum(stats[:, 0], 1.0)
        mean = stats[:, 1] / n
        return np.sqrt(np.maximum(stats[:, 2] / n - mean * mean, 0.0).mean(axis=1))

    def ticks(self, name: str, condition: np.ndarray) -> np.ndarray:
        """Per env: for how many consecutive ticks (this one included) `condition` [N] has held this episode
        (planning without memory: as long as any confirmation needs)."""
        if self._confirmed:
            return np.where(condition, 1 << 30, 0)
        n = self._memory.get("ticks/" + name)
        if n is None or n.shape != condition.shape:
            n = np.zeros(condition.shape, np.int64)
        n = np.where(condition & ~self.fresh, n + 1, condition.astype(np.int64))
        self._memory["ticks/" + name] = n
        return n

    def last_ticks(self, name: str) -> np.ndarray:
        """`ticks(name, ...)` as of the last tick (0 where this tick starts an episode)."""
        n = self._memory.get("ticks/" + name)
        return np.zeros(len(self.fresh), np.int64) if n is None else np.where(self.fresh, 0, n)

    def closing_grip(self, ticks: np.ndarray, rate: float) -> np.ndarray:
        """Grip command [N] whose target closes each finger about `rate` m per tick from open (at most the gripper's
        max_speed), `ticks` [N] ticks after closing began (0: open): a finger that hits the object at full speed can
        pass through it (sim/robot.py)."""
        g = self.env.task.robot.gripper
        if g.max_speed is not None:
            rate = min(rate, g.max_speed / self.env.control_hz)
        q = g.open - np.sign(g.open - g.closed) * (rate / g.finger_travel) * ticks
        return g.grip(np, np.clip(q, *g.ctrl_range))

    def close_ticks_for(self, ticks: int, rate: float) -> int:
        """Ticks to close on an object (at `rate`, closing_grip's) before moving it: `ticks`; for a gripper with a
        max_speed, at least as many as its target takes to reach closed: its servo squeezes only once its target is
        well past the object, and a speed-limited target gets there late."""
        g = self.env.task.robot.gripper
        if g.max_speed is None:
            return ticks
        per_tick = min(rate, g.max_speed / self.env.control_hz) / g.finger_travel
        return max(ticks, int(np.ceil(abs(g.open - g.closed) / per_tick - 1e-9)))

    def move(self, delta: np.ndarray) -> np.ndarray:
        """ee_delta translation part for a desired displacement (m), saturated at a full step."""
        return np.clip(delta / self.max_delta, -1.0, 1.0)

    def pack(self, move, grip, dyaw=None) -> np.ndarray:
        parts = [move]
        if self.use_yaw:
            parts.append((np.zeros(len(move)) if dyaw is None else np.clip(dyaw / self.max_yaw, -1, 1))[:, None])
        parts.append(np.asarray(grip, dtype=np.float64)[:, None])
        return np.concatenate(parts, axis=1).astype(np.float32)


class Estimate:
    """Per-env estimate of a noisy quantity [N, ...]: the mean of the episode's readings so far, then an
    exponential filter of gain `gain` (a number or one per env; it follows slow changes with a lag of about
    1 / gain ticks).

    `shift` [N, ...], when given, is a known change of the quantity since the last reading (e.g. the hand's
    commanded motion for a hand-relative position); it moves the estimate before the new reading is mixed in."""

    def __init__(self, gain: float):
        self.gain = gain  # a number, or one per env
        self.value = None
        self.count = None

    def update(self, reading: np.ndarray, fresh: np.ndarray, shift=None) -> np.ndarray:
        if self.value is None or self.value.shape != reading.shape:
            self.value, self.count = reading.copy(), np.zeros(len(reading))
            fresh = np.ones(len(reading), bool)
        prior = self.value if shift is None else self.value + shift
        self.count = np.where(fresh, 1.0, self.count + 1.0)
        g = np.maximum(1.0 / self.count, self.gain).reshape((-1,) + (1,) * (reading.ndim - 1))  # gain: scalar or [N]
        self.value = prior + g * (reading - prior)
        return self.value


def _builtins() -> dict:
    # Imported lazily: each task's expert lives in its own module next to the others.
    from robot_rl.sim.experts.color_lift import ColorLiftExpert
    from robot_rl.sim.experts.lift import LiftExpert
    from robot_rl.sim.experts.peg_insert import PegInsertExpert
    from robot_rl.sim.experts.push import PushExpert

    return {"color_lift": ColorLiftExpert, "lift": LiftExpert, "peg_insert": PegInsertExpert, "push": PushExpert}


def _check(obj) -> str | None:
    if callable(obj):
        return None
    return f"{obj!r} is not a class or factory of experts: it is called as expert(env, noise=, seed=)"


# task name -> its scripted expert (an Expert subclass, or any callable(env, noise=, seed=) whose result has
# act(obs) and reset(env_ids)), from the built-ins and the entry-point group "robot_rl.experts" (sim/registry.py)
EXPERTS = Registry("expert", "robot_rl.experts", _builtins, _check)
register_expert = EXPERTS.register


def make_expert(env: BatchedEnv, noise: float = 0.0, seed: int = 0, path: str | None = None) -> Expert:
    """The scripted expert of env's task (EXPERTS), or with `path` ("module:function") a function of yours,
    `act(obs) -> [N, A]` in the env's action units ([-1, 1] per dimension), wrapped in FunctionExpert."""
    if path:
        fn = load_object(path, "expert path")
        if not callable(fn):
            raise ValueError(f"expert path {path!r} is not a function act(obs) -> actions [N, A]")
        return FunctionExpert(env, fn, noise=noise, seed=seed)
    if env.task_name not in EXPERTS:
        raise ValueError(f"no scripted expert for task {env.task_name!r}; experts exist for {sorted(EXPERTS)} "
                         "(a package adds one under the entry-point group 'robot_rl.experts', docs/own_task.md; "
                         "or give a function of yours as expert.path=module:function)")
    return EXPERTS[env.task_name](env, noise=noise, seed=seed)


class FunctionExpert:
    """A scripted policy given as a function of the observation, `fn(obs) -> [N, A]` in [-1, 1], with Gaussian
    action noise of std `noise` (then clipped) as the built-in experts have: demonstrations of any env."""

    def __init__(self, env, fn, noise: float = 0.0, seed: int = 0):
        if noise < 0:
            raise ValueError(f"expert noise={noise} must be >= 0")
        self.env, self.fn, self.noise = env, fn, float(noise)
        self.rng = np.random.default_rng(seed)

    def reset(self, env_ids=None) -> None:
        pass

    def act(self, obs: dict) -> np.ndarray:
        a = np.asarray(self.fn(obs), dtype=np.float64)
        n = len(next(iter(obs.values())))
        if a.shape != (n, self.env.action_dim):
            raise ValueError(f"expert {getattr(self.fn, '__name__', self.fn)!r} returned actions of shape "
                             f"{a.shape}; expected {(n, self.env.action_dim)}")
        if self.noise:
            a = a + self.rng.normal(0.0, self.noise, a.shape)
        return np.clip(a, -1.0, 1.0).astype(np.float32)


def run_episodes(env: BatchedEnv, policy, episodes: int, seed: int = 0, progress=None, on_step=None) -> dict:
    """Roll `policy.act(obs) -> [N, A]` until `episodes` episodes finished; success rate, returns, lengths.

    A policy with `reset(env_ids)` is told when envs start new episodes (all at the start). `on_step(obs,
    done)` is called after the reset (done all False) and after every step, e.g. to render frames.
    """
    obs = env.reset(seed)
    reset = getattr(policy, "reset", None)
    if reset is not None:
        reset(None)
    if on_step is not None:
        on_step(obs, np.zeros(env.num_envs, dtype=bool))
    succ, rets, lens, ids, goals = [], [], [], [], []
    goal_of = list(env.goals) if hasattr(env, "goals") else [None] * env.num_envs  # goal of each env's episode
    ever = np.zeros(env.num_envs, dtype=bool)
    episode_of = np.zeros(env.num_envs, dtype=np.int64)  # per env: index of its current episode
    # Count only the first `episodes` episodes to start, so the sample is not biased toward short
    # (successful) episodes that finish early and restart.
    total_started = env.num_envs
    slots = np.arange(env.num_envs) < episodes
    while len(succ) < episodes:
        obs, r, done, info = env.step(policy.act(obs))
        ever |= info["success"]
        for i in np.nonzero(done)[0]:
            if slots[i]:
                succ.append(bool(ever[i]))
                rets.append(float(info["episode_return"][i]))
                lens.append(int(info["episode_length"][i]))
                ids.append((int(i), int(episode_of[i])))
                goals.append(goal_of[i])
                if progress is not None:
                    progress(1)
            ever[i] = False
            episode_of[i] += 1
            slots[i] = total_started < episodes
            total_started += 1
        if done.any() and hasattr(env, "goals"):  # auto-reset: the new episodes' goals
            now = env.goals
            for i in np.nonzero(done)[0]:
                goal_of[i] = now[i]
        if done.any() and reset is not None:
            reset(np.nonzero(done)[0])
        if on_step is not None:
            on_step(obs, done)
    return {
        "episodes": len(succ),
        "success_rate": float(np.mean(succ)),
        "mean_return": float(np.mean(rets)),
        "mean_length": float(np.mean(lens)),
        "successes": succ,
        "episode_ids": ids,  # (env index, episode index of that env): with the seed, identifies the episode
        "goals": goals,  # per episode: its goal (Task.goal; None for single-goal tasks)
    }
