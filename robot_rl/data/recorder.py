"""Episode recorder: turns the step stream of a batched, auto-resetting env into finished episodes.

Step t of an env is stored as (obs_t, action_t, then what the env returned for it: reward, terminated,
truncated, success, progress, intervention). With auto-reset (sim/env.py) the obs returned together
with done=True is already the next episode's first observation, so it starts the next episode's
buffer; the finished episode's last observation (info["final_obs"]) is not a step and is not stored.

Per-step keys: obs/<name> for every observation key, action, reward, terminated, truncated, success,
progress, intervention.
"""

from __future__ import annotations

import numpy as np

from robot_rl.data.episode_store import KeySpec

# Non-observation per-step keys and their dtypes (reward from step(), the rest from info).
STEP_FIELDS = {
    "reward": np.float32,
    "terminated": np.bool_,
    "truncated": np.bool_,
    "success": np.bool_,
    "progress": np.float32,
    "intervention": np.bool_,
}


def step_schema(obs: dict, action_dim: int) -> dict[str, KeySpec]:
    """The store keys a recorder produces for observations like `obs` ([N, ...] per key)."""
    schema = {f"obs/{k}": KeySpec(tuple(np.shape(v)[1:]), np.asarray(v).dtype) for k, v in obs.items()}
    schema["action"] = KeySpec((int(action_dim),), np.dtype(np.float32))
    schema.update({k: KeySpec((), np.dtype(t)) for k, t in STEP_FIELDS.items()})
    return schema


class EpisodeRecorder:
    """Buffers every env's steps; `add` returns {env index: per-step arrays} for episodes that ended."""

    def __init__(self, num_envs: int):
        self.num_envs = int(num_envs)
        self._rows: list[dict[str, np.ndarray]] = []  # one dict of [N, ...] arrays per step still needed
        self._offset = 0  # global step number of _rows[0]
        self._t = 0  # global step number of the next add
        self._start = np.zeros(self.num_envs, dtype=np.int64)  # first step of each env's current episode

    def add(self, obs: dict, action, reward, done, info: dict) -> dict[int, dict[str, np.ndarray]]:
        """Record one batched step (obs is the observation the action was taken from)."""
        row = {f"obs/{k}": np.array(v) for k, v in obs.items()}
        row["action"] = np.array(action, dtype=np.float32)
        row["reward"] = np.array(reward, dtype=np.float32)
        for k in ("terminated", "truncated", "success", "progress", "intervention"):
            row[k] = np.array(info[k], dtype=STEP_FIELDS[k])
        self._rows.append(row)
        t, self._t = self._t, self._t + 1
        finished = {}
        for i in np.nonzero(np.asarray(done))[0].tolist():
            rows = self._rows[self._start[i] - self._offset : t + 1 - self._offset]
            finished[i] = {k: np.stack([r[k][i] for r in rows]) for k in row}
            self._start[i] = t + 1
        drop = int(self._start.min()) - self._offset  # steps no env's open episode needs any more
        if drop > 0:
            del self._rows[:drop]
            self._offset += drop
        return finished
