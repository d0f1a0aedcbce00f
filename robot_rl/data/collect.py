"""Batched collection: roll a policy (e.g. a scripted expert) in a batched env, commit every finished episode.

Which episodes are kept: the first `episodes` episodes to *start* (env 0..N-1 first, then in order of
restart), as in sim.experts.run_episodes. Keeping the first ones to *finish* would over-sample short
(successful) episodes. Each env's episode is committed to the store in the step it ends, so an
interrupted collection keeps everything recorded up to then.
"""

from __future__ import annotations

import json
from typing import Callable

import numpy as np

from robot_rl.data.episode import FINAL_OBS
from robot_rl.data.episode_store import Episode, EpisodeStore
from robot_rl.data.recorder import EpisodeRecorder, step_schema


def policy_metadata(path, policy) -> dict:
    """Collect metadata of a BasePolicy's rollouts: its path as given and its weights hash
    (BasePolicy.weights_sha256), by which robot_rl.reward.episodes.rollout_policies tells whose failures a reward model
    saw, wherever the checkpoint was copied to."""
    return {"policy": str(path), "policy_sha256": policy.weights_sha256()}


# The fewest successful episodes the learning commands can use: successes are BC's only examples of the task
# done, and the reward models' progress anchors and classifier positives (robot_rl/reward/episodes.py).
MIN_SUCCESSES = 2


def too_few_successes(result: dict, randomization, noise_key: str, noise: float, noiseless: dict | None = None
                      ) -> str | None:
    """The problem (one line) when an expert's collection `result` (collect's) holds fewer than MIN_SUCCESSES
    successful episodes (all of them, for smaller collections): the measured success, the randomization ranges
    in force (`randomization`: sim.config.RandomizationConfig) and what to change; None when there are enough.
    `noiseless`: the same expert's evaluation without action noise, when there is one (says which to change)."""
    n, k = result["episodes"], result["successes"]
    if k >= min(MIN_SUCCESSES, n):
        return None
    ranges = ", ".join(f"env.randomization.{key}={_fmt(v)}" for key, v in randomization.overrides().items())
    ref = "" if noiseless is None else \
        f" (without action noise: success rate {noiseless['success_rate']:.2f} over {noiseless['episodes']} episodes)"
    return (f"the scripted expert succeeded in {k} of {n} episodes (success rate {k / n:.2f}) with {noise_key}={noise:g}"
            f"{ref} under randomization {ranges or 'none'}: fewer than {MIN_SUCCESSES} successes, too few to learn "
            f"from. These settings put the task out of the expert's reach: narrow the randomization ranges "
            f"(randomization=sim2real is the preset it is measured under) or lower {noise_key}")


def _fmt(v) -> str:
    return f"[{', '.join(f'{x:g}' for x in v)}]" if isinstance(v, (tuple, list)) else f"{v:g}"


# Metadata keys that differ between the episodes of one collection (or name the same policy another way).
_PER_EPISODE = ("env_index", "env_episode", "policy", FINAL_OBS)


def recorded_before(store: EpisodeStore, task: str, source: str, seed: int, metadata: dict) -> int:
    """How many episodes of `store` a collection with these settings already recorded: the same task, source,
    seed and metadata (backend, expert noise or policy weights). Their env seeds are the same, so collecting
    again would store the same episodes twice (e.g. re-running an interrupted collection)."""
    if store.n_episodes == 0:
        return 0
    task_, source_ = ([str(x) for x in store.episode_attr(n)] for n in ("task", "source"))  # zarr: StringDType
    same = (store.episode_attr("seed") == seed) & (np.array(task_) == task) & (np.array(source_) == source)
    want = {k: v for k, v in metadata.items() if k not in _PER_EPISODE}
    meta = store.episode_attr("metadata")
    return sum(1 for i in np.flatnonzero(same)
               if {k: v for k, v in json.loads(str(meta[i])).items() if k not in _PER_EPISODE} == want)


def final_vectors(final_obs: dict, i: int) -> dict[str, list[float]]:
    """Env i's final observation, vector keys only ({key: [dim] floats}, JSON-able), for an episode's metadata."""
    return {k: [float(x) for x in np.asarray(v[i]).ravel()] for k, v in final_obs.items()
            if not k.startswith("images/") and np.asarray(v).ndim == 2}


def collect(
    env,
    policy,
    store: EpisodeStore,
    episodes: int,
    seed: int = 0,
    source: str = "expert",
    metadata: dict | None = None,
    progress: Callable[[int], None] | None = None,
) -> dict:
    """Run `policy.act(obs) -> action [N, A]` in `env` until `episodes` episodes are committed to `store`.

    A policy with `reset(env_ids)` (e.g. a PolicyRunner around a BasePolicy) is told when envs start new
    episodes (all at the start), as in sim.experts.run_episodes.

    Per-episode attributes: task, the episode's instruction (`env.instruction` at its start), success (any
    step succeeded), source, seed (the env seed) and metadata + {env_index, env_episode, final_obs}: final_obs holds
    the vector keys of the observation the episode ended in (`info["final_obs"]`: a success state where the episode
    succeeded), which the per-step arrays do not (they hold the observation before each action; robot_rl/reward
    trains its success classifier on it). Image observations (env.cameras) are stored like the others, as
    obs/images/<camera>. Returns counts and rates."""
    if episodes < 1:
        raise ValueError(f"episodes={episodes} must be >= 1")
    n = env.num_envs
    obs = env.reset(seed)
    instruction = list(env.instruction)  # each env's current episode's; after an auto-reset, the next one's
    store.check_compatible(step_schema(obs, env.action_dim))  # before any simulation time is spent
    reset = getattr(policy, "reset", None)
    if reset is not None:
        reset(None)
    recorder = EpisodeRecorder(n)
    recording = np.arange(n) < episodes  # the env's current episode is one of the first `episodes`
    started = int(recording.sum())
    env_episode = np.zeros(n, dtype=np.int64)
    successes, lengths, env_steps = [], [], 0
    while len(successes) < episodes:
        action = policy.act(obs)
        next_obs, reward, done, info = env.step(action)
        env_steps += n
        batch = []
        for i, steps in recorder.add(obs, action, reward, done, info).items():
            if recording[i]:
                k = int(env_episode[i])
                batch.append(Episode(
                    steps=steps, task=env.task_name, source=source, success=bool(steps["success"].any()),
                    instruction=instruction[i], seed=int(seed),
                    metadata={**(metadata or {}), "env_index": i, "env_episode": k,
                              FINAL_OBS: final_vectors(info["final_obs"], i)},
                ))
            env_episode[i] += 1
            recording[i] = started < episodes
            started += int(recording[i])
        if np.any(done):
            instruction = list(env.instruction)
            if reset is not None:
                reset(np.nonzero(done)[0])
        if batch:
            store.append(batch)
            successes += [ep.success for ep in batch]
            lengths += [ep.length for ep in batch]
            if progress is not None:
                progress(len(batch))
        obs = next_obs
    return {
        "episodes": len(successes),
        "successes": int(sum(successes)),
        "steps": int(sum(lengths)),
        "success_rate": float(np.mean(successes)),
        "mean_length": float(np.mean(lengths)),
        "env_steps": env_steps,  # includes steps of envs whose episode was not kept
        "store_episodes": store.n_episodes,
        "store_steps": store.n_steps,
    }
