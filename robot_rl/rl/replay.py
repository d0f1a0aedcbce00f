"""Replay: a time-major ring of transitions from N envs, n-step returns, and the demo buffer.

Layout: row t holds the transition of every env at vector step t, arrays [rows, N, ...]:
    obs, base_action, action (executed), reward, next_obs, next_base_action, terminated, truncated, intervention,
    ended (the env's episode ended there, whatever the learner's flags say), after_claim (a learned success paid
    earlier in the env's episode: the learner's episode is over, the row is never sampled), potential,
    next_potential (Phi(obs), Phi(next_obs) of a shaped reward, as the shaping counts them: 1 where next_obs
    terminates; NaN where unknown: the learner then clips TD targets for any Phi)
Every transition carries its own next observation and the base action at it, so an n-step walk may stop
at any row and bootstrap from there: at an episode's end (auto-reset means the next row is another
episode), at the newest row (its successors are not written yet), or after n steps.

n-step target of a transition at logical row L in env e:
    ret      = sum_{k < K} gamma^k r_{L+k}       K = steps until (and including) the first done, <= n,
                                                 and never past the newest row
    discount = gamma^K if the last included step did not terminate, else 0
    next     = next_obs / next_base_action of the last included step
    potential = the first step's, next_potential = the last included step's
    potential_gain = gamma^K next_potential - potential: the shaping terms of the K steps, which telescope
                 (lambda times this is the shaping part of ret; the learner rescales it when lambda decays)
A time-limit truncation (or any cut that is not a true termination: a restart, a dropped demo tail)
bootstraps from the stored next observation; only `terminated` zeroes the discount.

The demo buffer is the same ring with one env column holding the store's episodes end to end; its base
actions are relabeled with the base policy (the base's first action at each demo state, queue empty). It
records the store step of each row's obs and next_obs (`demo_steps`), so a reward model that reads what the
ring does not keep (camera frames, the episode's instruction) can relabel it from the store.
"""

from __future__ import annotations

import numpy as np

FLOAT_FIELDS = ("obs", "base_action", "action", "reward", "next_obs", "next_base_action")
# ended: the env's episode ended after this transition (its own end, or one the collector made): where a learned
# classifier's success may pay once per env episode, a relabel finds the episodes by it (robot_rl/reward/shaping.py)
# after_claim: a learned classifier's success paid earlier in this env episode (rl.classifier_success=once): the
# learner's episode ended at that claim, so the row is kept (the env's episode runs on) but never sampled
BOOL_FIELDS = ("terminated", "truncated", "intervention", "ended", "after_claim")
POTENTIAL_FIELDS = ("potential", "next_potential")  # float, NaN when unknown
OPTIONAL_FIELDS = {"intervention": False, "ended": False, "after_claim": False,  # add()'s default when not given
                   **dict.fromkeys(POTENTIAL_FIELDS, np.nan)}


class Replay:
    def __init__(self, capacity: int, num_envs: int, obs_dim: int, action_dim: int):
        """Room for at least `capacity` transitions (rounded up to whole rows of num_envs)."""
        if capacity < 1 or num_envs < 1:
            raise ValueError(f"replay capacity={capacity} and num_envs={num_envs} must be >= 1")
        self.rows = -(-int(capacity) // int(num_envs))
        self.num_envs, self.obs_dim, self.action_dim = int(num_envs), int(obs_dim), int(action_dim)
        n, r = self.num_envs, self.rows
        shapes = {"obs": (obs_dim,), "base_action": (action_dim,), "action": (action_dim,), "reward": (),
                  "next_obs": (obs_dim,), "next_base_action": (action_dim,)}
        self.data = {k: np.zeros((r, n, *s), np.float32) for k, s in shapes.items()}
        self.data.update({k: np.zeros((r, n), bool) for k in BOOL_FIELDS})
        self.data.update({k: np.full((r, n), OPTIONAL_FIELDS[k], np.float32) for k in POTENTIAL_FIELDS})
        self.written = 0  # rows ever written (logical index of the next row)

    def __len__(self) -> int:
        return min(self.written, self.rows) * self.num_envs

    @property
    def oldest(self) -> int:
        return max(0, self.written - self.rows)

    def add(self, **fields) -> None:
        """Append one row: every field [N, ...] (all of FLOAT_FIELDS and terminated, truncated; intervention
        defaults to False, ended to terminated | truncated, potential and next_potential to NaN)."""
        missing = sorted(set(FLOAT_FIELDS + BOOL_FIELDS[:2]) - set(fields))
        unknown = sorted(set(fields) - set(self.data))
        if missing or unknown:
            raise KeyError(f"replay.add: missing fields {missing}, unknown fields {unknown}")
        p = self.written % self.rows
        if "ended" not in fields:
            fields["ended"] = np.asarray(fields["terminated"], bool) | np.asarray(fields["truncated"], bool)
        for k, arr in self.data.items():
            arr[p] = fields[k] if k in fields else OPTIONAL_FIELDS[k]
        self.written += 1

    def mark_cut(self) -> None:
        """The newest row's episodes do not continue in the next row (the envs were reset): mark it truncated
        where it did not end anyway, so n-step walks stop there and bootstrap from its next_obs."""
        if self.written:
            p = (self.written - 1) % self.rows
            self.data["truncated"][p] |= ~self.data["terminated"][p]
            self.data["ended"][p] = True

    # ---- n-step -------------------------------------------------------------------------------------
    def nstep(self, rows: np.ndarray, envs: np.ndarray, n: int, gamma: float) -> dict[str, np.ndarray]:
        """n-step transitions starting at logical rows `rows` [B] of envs `envs` [B] (see module docstring)."""
        rows, envs = np.asarray(rows, np.int64), np.asarray(envs, np.int64)
        if rows.size and (rows.min() < self.oldest or rows.max() >= self.written):
            raise IndexError(f"rows must be in [{self.oldest}, {self.written}) (oldest kept, newest written)")
        d = self.data
        steps = rows[:, None] + np.arange(n)  # [B, n] logical rows
        avail = steps < self.written
        p = np.minimum(steps, self.written - 1) % self.rows
        e = envs[:, None]
        done = d["terminated"][p, e] | d["truncated"][p, e]
        # step k is included when it exists and no earlier step ended the episode
        ended_before = np.concatenate([np.zeros((len(rows), 1), bool), np.cumsum(done, 1)[:, :-1] > 0], axis=1)
        include = avail & ~ended_before
        k = include.sum(1)  # >= 1: the first step always exists
        powers = gamma ** np.arange(n, dtype=np.float64)
        ret = (d["reward"][p, e] * include * powers).sum(1)
        last = p[np.arange(len(rows)), k - 1]
        discount = np.where(d["terminated"][last, envs], 0.0, gamma ** k.astype(np.float64))
        first = p[:, 0]
        return {
            "obs": d["obs"][first, envs], "base_action": d["base_action"][first, envs],
            "action": d["action"][first, envs], "ret": ret.astype(np.float32), "discount": discount.astype(np.float32),
            "next_obs": d["next_obs"][last, envs], "next_base_action": d["next_base_action"][last, envs],
            "potential": d["potential"][first, envs], "next_potential": d["next_potential"][last, envs], "steps": k,
            "potential_gain": (gamma ** k * d["next_potential"][last, envs]
                               - d["potential"][first, envs]).astype(np.float32),
        }

    def sample(self, batch_size: int, n: int, gamma: float, rng: np.random.Generator) -> dict[str, np.ndarray]:
        """`batch_size` n-step transitions drawn uniformly over the kept rows and envs that are not `after_claim`."""
        if self.written == 0:
            raise ValueError("cannot sample from an empty replay")
        rows = rng.integers(self.oldest, self.written, size=batch_size)
        envs = rng.integers(0, self.num_envs, size=batch_size)
        skip = self.data["after_claim"][rows % self.rows, envs]
        tries = 0
        while skip.any():  # drawn again: uniform over the rest
            tries += 1
            if tries == 20 and self.data["after_claim"][: min(self.written, self.rows)].all():
                raise ValueError("every kept replay row follows a classifier claim: nothing to sample")
            k = int(skip.sum())
            rows[skip] = rng.integers(self.oldest, self.written, size=k)
            envs[skip] = rng.integers(0, self.num_envs, size=k)
            skip = self.data["after_claim"][rows % self.rows, envs]
        return self.nstep(rows, envs, n, gamma)

    # ---- checkpoints --------------------------------------------------------------------------------
    def state(self) -> dict:
        kept = min(self.written, self.rows)
        return {"written": self.written, "rows": self.rows, **{k: v[:kept] for k, v in self.data.items()}}

    def load_state(self, state: dict) -> None:
        if int(state["rows"]) != self.rows or state["obs"].shape[1:] != self.data["obs"].shape[1:]:
            raise ValueError(f"saved replay has {state['rows']} rows x {state['obs'].shape[1:]}, this one "
                             f"{self.rows} x {self.data['obs'].shape[1:]}")
        kept = min(int(state["written"]), self.rows)
        for k, v in self.data.items():
            v[:kept] = state[k] if k in state else OPTIONAL_FIELDS[k]  # replays saved before a field existed
        if "ended" not in state:  # saved before it existed: the learner's episode ends are the best guess
            self.data["ended"][:kept] = self.data["terminated"][:kept] | self.data["truncated"][:kept]
        self.written = int(state["written"])


def sample_mixed(online: Replay, demos: Replay | None, batch_size: int, demo_fraction: float, n: int, gamma: float,
                 rng: np.random.Generator) -> dict[str, np.ndarray]:
    """A batch of round(demo_fraction * batch_size) demo transitions and the rest from online replay."""
    n_demo = int(round(demo_fraction * batch_size)) if demos is not None and len(demos) else 0
    parts = [online.sample(batch_size - n_demo, n, gamma, rng)]
    if n_demo:
        parts.append(demos.sample(n_demo, n, gamma, rng))
    if len(parts) == 1:
        return parts[0]
    return {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}


def demo_replay(store, base, obs_keys: tuple[str, ...], reward: str = "success", relabel_batch: int = 512,
                extra_capacity: int = 0, base_features: bool = False) -> Replay:
    """The episodes of an episode store as a one-column Replay, base actions relabeled with `base`.

    Rewards follow the training reward (`success`: 1.0 on steps that succeed, `env`: the stored reward).
    `extra_capacity` leaves room for transitions added later (human corrections, `add_transitions`); once it
    is used up they replace the oldest rows.
    An episode's last step ends it: terminated as stored, otherwise (its next observation is not stored)
    the last step is dropped and the one before becomes a truncation that bootstraps from the last obs.
    base_features: the obs rows also hold the base's features of each step (ResidualConfig.base_features)."""
    from robot_rl.data.sampler import SequenceSampler

    obs_horizon = base.spec.obs_horizon if base is not None else 1
    skeys = [f"obs/{k}" for k in obs_keys]
    # what the base reads besides the residual's vector keys: its own vector keys, camera frames (uint8)
    base_keys = sorted(set(base.spec.obs_dims) | set(base.spec.image_shapes)) if base is not None else []
    extra = [f"obs/{k}" for k in base_keys if f"obs/{k}" not in skeys]
    sampler = SequenceSampler(store, obs_keys=skeys + extra, action_keys=("action",), obs_horizon=obs_horizon,
                              action_horizon=1)
    w = sampler.windows(np.arange(len(sampler)))
    m = len(sampler)
    obs = np.concatenate([w[k][:, -1] for k in skeys], axis=-1).astype(np.float32)
    action = w["action"][:, 0].astype(np.float32)
    if base is None:
        base_action = np.zeros_like(action)
    else:
        base.reset(None)
        text = None
        if base.spec.instruction:  # each window's episode instruction
            text = np.array([str(x) for x in store.episode_attr("instruction")], dtype=object)[w["episode"]]

        def query(i: int) -> dict:
            q = {k: w[f"obs/{k}"][i: i + relabel_batch] for k in base_keys}
            if text is not None:
                q["instruction"] = text[i: i + relabel_batch]
            return q

        batches = range(0, m, relabel_batch)
        if base_features:  # one encoder pass gives both
            pairs = [base.act_and_features(query(i)) for i in batches]
            base_action = np.concatenate([a[:, 0] for a, _ in pairs]).astype(np.float32)
            obs = np.concatenate([obs, np.concatenate([f for _, f in pairs])], axis=-1).astype(np.float32)
        else:
            base_action = np.concatenate([base.act(query(i))[:, 0] for i in batches]).astype(np.float32)
    if reward == "success":
        r = store.read("success").astype(np.float32)
    elif reward == "env":
        r = store.read("reward").astype(np.float32)
    else:
        raise ValueError(f"reward={reward!r}; valid: 'success', 'env'")
    ends = store.episode_ends
    if "terminated" in store.keys:
        terminated = store.read("terminated").astype(bool)
    else:  # older stores: an episode that ended in success terminated there
        terminated = np.zeros(m, bool)
        terminated[ends - 1] = store.read("success").astype(bool)[ends - 1]
    intervention = store.read("intervention").astype(bool)
    starts = np.concatenate([[0], ends[:-1]])
    keep = np.ones(m, bool)
    truncated = np.zeros(m, bool)
    next_idx = np.arange(1, m + 1)
    for s, e in zip(starts, ends):
        if not terminated[e - 1]:
            keep[e - 1] = False
            if e - 1 > s:
                truncated[e - 2] = True
        next_idx[e - 1] = e - 1  # a terminal step's next observation is never used
    next_idx = np.minimum(next_idx, m - 1)
    idx = np.nonzero(keep)[0]
    if not len(idx):
        raise ValueError(f"episode store {store.path} has no usable demo transitions")
    out = Replay(len(idx) + int(extra_capacity), 1, obs.shape[1], action.shape[1])  # extra: room for corrections
    fields = dict(obs=obs[idx], base_action=base_action[idx], action=action[idx], reward=r[idx],
                  next_obs=obs[next_idx[idx]], next_base_action=base_action[next_idx[idx]],
                  terminated=terminated[idx], truncated=truncated[idx], intervention=intervention[idx],
                  ended=terminated[idx] | truncated[idx])
    for k, v in fields.items():
        out.data[k][: len(idx), 0] = v
    out.written = len(idx)
    out.demo_steps = np.stack([idx, next_idx[idx]], axis=1)  # [rows, 2] store steps of obs and next_obs
    return out


def add_transitions(buffer: Replay, rows: dict[str, np.ndarray]) -> None:
    """Append single transitions (fields [K, ...]) to a one-column buffer (the demo buffer), each one its own
    n-step walk: a transition that did not terminate is cut there and bootstraps from its next_obs."""
    if buffer.num_envs != 1:
        raise ValueError("add_transitions appends to a one-column buffer (the demo buffer)")
    for i in range(len(rows["reward"])):
        one = {k: v[i: i + 1] for k, v in rows.items()}
        one["truncated"] = one["truncated"] | ~one["terminated"]
        one["ended"] = np.ones(1, bool)
        buffer.add(**one)
