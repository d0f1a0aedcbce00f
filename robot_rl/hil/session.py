"""A teleop session on one sim env: record teleop demos, or supervise a policy and record interventions.

Episode k starts from env.reset(seed + k) (so its store `seed` identifies it exactly). Each step: the policy
(if any) proposes an action, the InterventionController lets the human override it, the env steps, the
step is buffered with its intervention flag. An episode ends when the env ends it (success or time
limit), when the human marks success / failure or resets, or when the device is lost with nobody else
to drive; it is then committed to the store:
    source     teleop (no policy) | intervention (a human step in it) | policy (supervised, no take-over)
    success    the human's mark if given, else the sim's success
    metadata   intervention counts and rate, take-overs, rewinds, device_lost, human_label, sim_success,
               end (env | success | failure | reset | device_lost | interrupted)
Rewind (MuJoCo C env only): the state goes back `rewind_steps` steps, those steps leave the episode (they
are counted in metadata.rewinds: where, how many, how many were human), and the human corrects from there.
When the human hands back, the policy replans from the current observation (its queued chunk was planned
before the take-over). Ctrl-C commits the episode in progress (end = interrupted) before stopping.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Callable

import numpy as np

from robot_rl.data.episode_store import Episode
from robot_rl.data.recorder import STEP_FIELDS, step_schema


@dataclasses.dataclass
class SessionHooks:
    on_step: Callable | None = None  # (episode, step, obs) after every env step: viewer sync, frames
    pace: Callable | None = None  # called once per step: sleep to real time
    on_episode: Callable | None = None  # (Episode) after each commit


def run_session(env, controller, store, episodes: int, seed: int = 0, policy=None, rewinder=None,
                rewind_steps: int = 0, metadata: dict | None = None, hooks: SessionHooks | None = None) -> dict:
    """Record `episodes` episodes of env 0 (a 1-env batched env) into `store`; returns counts and rates.

    policy: a PolicyRunner-like object (`reset(ids)`, `act(obs) -> [1, A]`) or None for pure teleop."""
    if env.num_envs != 1:
        raise ValueError(f"a teleop session drives one env; got num_envs={env.num_envs} (set env.num_envs=1)")
    hooks = hooks or SessionHooks()
    neutral = env.action_space.neutral[None]
    results, stop = [], None
    for k in range(episodes):
        ep_seed = int(seed) + k
        obs = env.reset(ep_seed)
        instruction = env.instruction[0]  # the episode's own (color_lift: names the cube to lift)
        if k == 0:
            store.check_compatible(step_schema(obs, env.action_dim))
        if policy is not None:
            policy.reset(None)
        if rewinder is not None:
            rewinder.clear()
        rows: list[dict] = []
        end, was_human = None, False
        try:
            while end is None:
                proposal = policy.act(obs) if policy is not None else neutral
                action, human = controller.act(obs, proposal)
                if policy is not None and was_human and not human[0]:
                    policy.reset(None)  # handed back: replan from here, not from a chunk of before the take-over
                    action = np.asarray(policy.act(obs), np.float32)
                was_human = bool(human[0])
                ev = controller.events
                if rewinder is not None and ev["rewind"][0]:
                    obs, undone = rewinder.back(rewind_steps)
                    cut = rows[len(rows) - undone:] if undone else []
                    del rows[len(rows) - undone:]
                    controller.rewind(0, undone + 1, sum(bool(r["intervention"]) for r in cut) + int(human[0]))
                    if policy is not None:
                        policy.reset(None)  # its chunk was planned for the state we left
                    continue
                if rewinder is not None:
                    rewinder.push()
                next_obs, reward, done, info = env.step(action)
                rows.append({
                    **{f"obs/{key}": np.asarray(v[0]) for key, v in obs.items()},
                    "action": action[0], "reward": reward[0], "terminated": info["terminated"][0],
                    "truncated": info["truncated"][0], "success": info["success"][0],
                    "progress": info["progress"][0], "intervention": human[0],
                })
                live = controller.current(0)
                if done[0]:
                    end = "env"
                elif live.label is not None:
                    end = live.label
                elif ev["reset"][0]:
                    end = "reset"
                elif live.device_lost and policy is None:
                    end = "device_lost"
                if end not in (None, "env"):
                    rows[-1]["truncated"] = True  # cut short by the human: not a terminal state
                obs = next_obs
                if hooks.on_step is not None:
                    hooks.on_step(k, len(rows), obs)
                if hooks.pace is not None:
                    hooks.pace()
        except KeyboardInterrupt:
            end = stop = "interrupted"
            if rows:
                rows[-1]["truncated"] = True
        stats = controller.end_episodes([True])[0]
        if rows:
            ep = _episode(env, rows, stats, end, ep_seed, instruction, policy is not None, metadata)
            store.append(ep)
            results.append(ep)
            if hooks.on_episode is not None:
                hooks.on_episode(ep)
        if stop or end == "device_lost":
            stop = stop or "device_lost"
            break
    steps = sum(ep.length for ep in results)
    human = sum(int(ep.steps["intervention"].sum()) for ep in results)
    return {
        "episodes": len(results),
        "steps": steps,
        "intervention_steps": human,
        "intervention_fraction": human / steps if steps else 0.0,
        "success_rate": float(np.mean([ep.success for ep in results])) if results else 0.0,
        "sim_success_rate": float(np.mean([ep.metadata["sim_success"] for ep in results])) if results else 0.0,
        "sources": {s: sum(ep.source == s for ep in results) for s in sorted({ep.source for ep in results})},
        "stopped": stop,  # None, "interrupted" or "device_lost"
        "store_episodes": store.n_episodes,
    }


def _episode(env, rows, stats, end, seed, instruction, supervised, metadata) -> Episode:
    steps = {key: np.stack([r[key] for r in rows]) for key in rows[0]}
    for key, dtype in STEP_FIELDS.items():
        steps[key] = steps[key].astype(dtype)
    steps["action"] = steps["action"].astype(np.float32)
    sim_success = bool(steps["success"].any())
    human = bool(steps["intervention"].any())
    source = "intervention" if supervised and human else ("policy" if supervised else "teleop")
    return Episode(
        steps=steps, task=env.task_name, source=source,
        success=(stats.label == "success") if stats.label is not None else sim_success,
        instruction=instruction, seed=int(seed),
        metadata={**(metadata or {}), **stats.to_json(), "sim_success": sim_success, "end": end,
                  "recorded_at": time.time()},
    )
