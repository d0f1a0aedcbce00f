"""The reward wrapper: r = r_success + lambda * (gamma * Phi(s') - Phi(s)), with Phi(s') = 1 where s' terminates.

Potential-based shaping (Ng, Harada & Russell 1999) adds F(s, s') = gamma Phi(s') - Phi(s) to every step.
Over an episode the terms telescope: the shaped discounted return from s_0 is the unshaped one minus
lambda Phi(s_0), plus lambda gamma^T Phi(s_T) at the end: at a time-limit cut Phi(s_T) is the learned
potential (the part a critic bootstraps), at a termination it is TERMINAL_POTENTIAL = 1. The learner's
episodes terminate only at success (the classifier's, or the env's), the state whose progress is 1 by
construction, so every terminal state has the same potential and the shaped problem is the unshaped one with
a success reward of 1 + lambda gamma, minus a per-start-state constant: the optimal policy does not change,
and a wrong Phi can slow learning but cannot make a different policy optimal (what can still be hacked is
r_success, a classifier false positive). Why not the textbook Phi(terminal) = 0: the success step then pays
1 - lambda Phi(s) ~ 0 for lambda = 1, and the only large reward of the task is gone; on lift without demos
(one seed) that took 35k env steps to 80% success against 25k with Phi(terminal) = 1. n-step returns
telescope the same way (sum_k gamma^k F_k = gamma^n Phi(s_n) - Phi(s_0)).

r_success comes from the learned success classifier (`success="classifier"`, what a robot has) or from
the env (`success="env"`, sim only). With the classifier the learner's episode ends where the classifier
fires: `terminated` = classifier success, and an env episode that ends without it (time limit, or a success
the classifier missed) is a cut that bootstraps (`truncated`), so no simulator success leaks into training.

A model that reads camera frames gets them from the observation dicts ("images/<camera>", uint8: the env must
render those cameras, env.cameras=[...]), and one that reads the instruction gets each row's episode
instruction (`instruction=`: env.instruction online, the store's per-episode instruction for demonstrations,
`relabel_replay(..., store=)`); the replay keeps neither, so demo rows are relabeled from their store.
"""

from __future__ import annotations

import numpy as np

SUCCESS_SOURCES = ("classifier", "env")


RELABELED = ("reward", "terminated", "truncated", "potential", "next_potential")  # the replay fields label() writes
TERMINAL_POTENTIAL = 1.0  # Phi of a terminal (= success) state: the progress of a success state


def counted_potential(phi_next: np.ndarray, terminated: np.ndarray) -> np.ndarray:
    """Phi(s') as the shaping counts it: TERMINAL_POTENTIAL where s' terminates, else Phi(s'), float64 [N]."""
    return np.where(np.asarray(terminated, bool), TERMINAL_POTENTIAL, np.asarray(phi_next, np.float64))


def potential_shaping(phi: np.ndarray, phi_next: np.ndarray, terminated: np.ndarray, gamma: float,
                      scale: float = 1.0) -> np.ndarray:
    """scale * (gamma * Phi(s') - Phi(s)) with Phi(s') = TERMINAL_POTENTIAL where s' terminates, element-wise [N]
    float32."""
    return (scale * (gamma * counted_potential(phi_next, terminated) - np.asarray(phi, np.float64))).astype(np.float32)


class LearnedReward:
    """r = r_success + shaping * (gamma Phi(s') - Phi(s)) from a RewardModel, over batched transitions."""

    def __init__(self, model, gamma: float, shaping: float = 1.0, success: str = "classifier"):
        if success not in SUCCESS_SOURCES:
            raise ValueError(f"success={success!r}; valid: {', '.join(SUCCESS_SOURCES)}")
        if not 0.0 <= gamma <= 1.0:
            raise ValueError(f"gamma={gamma!r} must be in [0, 1]")
        if not shaping >= 0:
            raise ValueError(f"shaping={shaping!r} must be >= 0 (the weight lambda of the potential term)")
        self.model, self.gamma, self.shaping, self.success = model, float(gamma), float(shaping), success

    @property
    def reads_frames(self) -> bool:
        return bool(self.model.spec.image_shapes)

    @property
    def reads_instruction(self) -> bool:
        return bool(self.model.spec.instruction)

    @property
    def bounds(self) -> tuple[float, float]:
        """Range of one step's reward: r_success in {0, 1} plus a shaping term in [-shaping, shaping]."""
        return -self.shaping, 1.0 + self.shaping

    def __call__(self, obs: dict, next_obs: dict, env_success: np.ndarray, terminated: np.ndarray,
                 truncated: np.ndarray, instruction=None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(reward, terminated, truncated) [N] for transitions obs -> next_obs ({key: [N, dim] | uint8 [N, H, W, 3]};
        next_obs is the observation the step reached, before any auto-reset) given the env's own flags;
        `instruction`: [N] str, each transition's episode instruction (models that read one)."""
        return self.label(obs, next_obs, env_success, terminated, truncated, instruction)[:3]

    def label(self, obs: dict, next_obs: dict, env_success: np.ndarray, terminated: np.ndarray,
              truncated: np.ndarray, instruction=None, eligible=None, fired=None) -> tuple[np.ndarray, ...]:
        """(reward, terminated, truncated, potential, next_potential) [N]: __call__'s labels, Phi(obs) and
        Phi(next_obs) as the shaping counts them (TERMINAL_POTENTIAL where next_obs terminates; NaN without
        shaping), which replay rows keep: the learner clips TD targets to the values this shaping allows, its
        critics read them, and it rescales the shaping term by them when lambda decays. `eligible` [N] bool
        (classifier only): where False the classifier's success neither pays nor terminates (it fired earlier in
        that episode); `fired` [N]: the classifier's success at next_obs when the caller computed it already."""
        terminated, truncated = np.asarray(terminated, bool), np.asarray(truncated, bool)
        if self.reads_instruction and instruction is not None and not isinstance(instruction, str):
            instruction = np.asarray(list(instruction), dtype=object)
        if self.success == "classifier":
            hit = self.model.success(next_obs, instruction) if fired is None else np.asarray(fired, bool)
            if eligible is not None:
                hit = hit & np.asarray(eligible, bool)
            ended = terminated | truncated
            terminated, truncated = hit, ended & ~hit
        else:
            hit = np.asarray(env_success, bool)
        r = hit.astype(np.float32)
        potential, next_potential = (np.full(len(r), np.nan, np.float32) for _ in range(2))
        if self.shaping > 0:  # Phi of obs and next_obs in one batched pass
            n = len(r)
            both = {k: np.concatenate([obs[k], next_obs[k]]) for k in self.model.spec.inputs}
            text = instruction
            if self.reads_instruction and instruction is not None and not isinstance(instruction, str):
                text = np.concatenate([instruction, instruction])
            phi = self.model.progress(both, text)
            r = r + potential_shaping(phi[:n], phi[n:], terminated, self.gamma, self.shaping)
            potential = np.asarray(phi[:n], np.float32)
            next_potential = counted_potential(phi[n:], terminated).astype(np.float32)
        return r.astype(np.float32), terminated, truncated, potential, next_potential


def first_fires(hit: np.ndarray, ended: np.ndarray) -> np.ndarray:
    """Rows [T] (one env, in time order) where a success may still pay: up to and including the first `hit` of each
    env episode, the episodes split after the rows where `ended`."""
    hit, ended = np.asarray(hit, bool), np.asarray(ended, bool)
    starts = np.concatenate([[True], ended[:-1]])
    episode = np.cumsum(starts) - 1
    before = np.cumsum(hit) - hit  # hits in earlier rows
    return before - before[np.nonzero(starts)[0]][episode] == 0


def relabel_replay(replay, reward: LearnedReward, obs_keys: tuple[str, ...], obs_dims: dict[str, int],
                   store=None, chunk: int = 512, once: bool = False) -> None:
    """Recompute reward / terminated / truncated / potential of every kept row of a Replay (e.g. the demo buffer, built
    with the env's sparse success as reward) with `reward`; obs are unflattened in `obs_keys` order. `once`: the
    classifier's success pays only at its first fire in each env episode (the replay's `ended` rows split them;
    rl.classifier_success=once|end), and the rows after it are marked after_claim (never sampled). A model that
    reads frames or instructions needs the demo buffer's episode `store` (demo_replay records each row's store
    steps): frames and instructions are read from it, `chunk` rows at a time (and every fire pays)."""
    def unflatten(x: np.ndarray) -> dict[str, np.ndarray]:
        out, i = {}, 0
        for k in obs_keys:
            out[k] = x[:, i:i + obs_dims[k]]
            i += obs_dims[k]
        return out

    kept = min(replay.written, replay.rows)
    d = replay.data
    if reward.reads_frames or reward.reads_instruction:
        _relabel_from_store(replay, reward, unflatten, store, kept, chunk)
        return
    rows = np.arange(replay.written - kept, replay.written) % replay.rows  # physical rows, oldest first
    once = once and reward.success == "classifier"
    for e in range(replay.num_envs):
        obs, nxt = unflatten(d["obs"][rows, e]), unflatten(d["next_obs"][rows, e])
        args = (d["reward"][rows, e] > 0.5, d["terminated"][rows, e], d["truncated"][rows, e])
        fired = reward.model.success(nxt) if once else None  # one classifier pass serves both
        eligible = first_fires(fired, d["ended"][rows, e]) if once else None
        for k, v in zip(RELABELED, reward.label(obs, nxt, *args, eligible=eligible, fired=fired)):
            d[k][rows, e] = v
        d["after_claim"][rows, e] = False if eligible is None else ~eligible  # past the learner's episode


def _relabel_from_store(replay, reward: LearnedReward, unflatten, store, kept: int, chunk: int) -> None:
    """relabel_replay for models that read frames / instructions: the demo rows' frames and episode instructions
    come from `store` at the steps demo_replay recorded (replay.demo_steps [rows, 2]: obs step, next_obs step)."""
    steps = getattr(replay, "demo_steps", None)
    what = " and ".join(w for w, on in (("camera frames", reward.reads_frames),
                                        ("instructions", reward.reads_instruction)) if on)
    if store is None or steps is None or replay.num_envs != 1 or len(steps) < kept:
        raise ValueError(f"the reward model reads {what}, which a replay does not keep: relabel a demo buffer "
                         "built by demo_replay(store, ...) and pass store=")
    spec = reward.model.spec
    if spec.image_shapes:
        from robot_rl.reward.episodes import camera_shapes

        shapes = camera_shapes([store], list(spec.image_shapes), spec.task)  # a missing camera: how to record it
        for k, want in spec.image_shapes.items():
            if shapes[k] != list(want):
                raise ValueError(f"the reward model reads {k} {want[0]}x{want[1]}, demo store {store.path} holds "
                                 f"{shapes[k][0]}x{shapes[k][1]} frames")
    text = None
    if spec.instruction:
        from robot_rl.reward.labels import episode_index
        from robot_rl.reward.episodes import episode_instructions

        text = episode_instructions(store)[episode_index(store.episode_ends)[0]]  # [store steps]
    d = replay.data
    for i in range(0, kept, chunk):
        rows = slice(i, min(i + chunk, kept))
        obs, nxt = unflatten(d["obs"][rows, 0]), unflatten(d["next_obs"][rows, 0])
        s, ns = steps[rows, 0], steps[rows, 1]
        lo, hi = int(min(s.min(), ns.min())), int(max(s.max(), ns.max())) + 1
        for k in spec.image_shapes:  # one contiguous read per chunk (rows follow the store's order)
            block = store.read(f"obs/{k}", lo, hi)
            obs[k], nxt[k] = block[s - lo], block[ns - lo]
        labels = reward.label(obs, nxt, d["reward"][rows, 0] > 0.5, d["terminated"][rows, 0],
                              d["truncated"][rows, 0], None if text is None else text[s])
        for k, v in zip(RELABELED, labels):
            d[k][rows, 0] = v


def from_config(path: str, reward: str, shaping: float, gamma: float, envs=()) -> LearnedReward:
    """The LearnedReward of residual RL's config: the reward model at `path`, checked against `envs`
    (SpecMismatch naming every difference, e.g. a camera the model reads and the env does not render:
    env.cameras=[...]), its classifier as r_success when reward == "learned", the env's success flag when
    reward == "success"."""
    from robot_rl.reward.model import load_reward_model

    model = load_reward_model(path)
    for env in envs:
        model.spec.check_env(env)
    return LearnedReward(model, gamma, shaping, "classifier" if reward == "learned" else "env")
