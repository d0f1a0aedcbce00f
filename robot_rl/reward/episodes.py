"""The episodes a reward model trains on: every step of the training stores, read and checked.

    data = load_episodes([demos, rollouts], spec)   # Episodes: observations the model reads, episode ends and
                                                     # outcomes, the failed-state neighbour search's features,
                                                     # ground-truth progress / success (evaluation only)

RewardDataError names what the stores lack and the command that records it (robot-rl-collect ...). Training on
these: robot_rl/reward/train.py.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Sequence

import numpy as np
import torch

from robot_rl.data.collect import MIN_SUCCESSES
from robot_rl.reward import labels as L
from robot_rl.reward.model import RewardSpec

FAILURE_HELP = ("collect base-policy rollouts, which include failures, with robot-rl-collect task={task} "
                "policy=<train-bc run>/policy episodes=200 out=ROLLOUTS and pass rollouts=ROLLOUTS")


class RewardDataError(ValueError):
    """The episode stores cannot train a reward model; the message says what is missing and how to get it."""


@dataclasses.dataclass
class Episodes:
    """Every step of the training stores, concatenated; `gt_*` are simulator ground truth, evaluation only."""

    obs: dict[str, np.ndarray]  # what the model reads: key -> [steps, dim] float32 | uint8 [steps, H, W, 3]
    ends: np.ndarray  # [episodes] cumulative
    success: np.ndarray  # [episodes] outcome
    source: np.ndarray  # [episodes] expert | teleop | policy | intervention
    store: np.ndarray  # [episodes] index of the store it came from
    gt_progress: np.ndarray | None  # [steps] the env's progress after each step, when recorded
    gt_success: np.ndarray | None  # [steps] the env's success flag of each step, when recorded
    instruction: np.ndarray | None = None  # [episodes] str, when the model reads instructions
    features: np.ndarray | None = None  # [steps, D] the failed-state neighbour search's space (None: obs vectors)
    feature_keys: tuple[str, ...] = ()  # what `features` holds: vector keys, or "images/<camera>@8x8"
    # [steps] True on the rows that are an episode's final observation (its metadata's final_obs, one more row at the
    # episode's end; a success state where it succeeded), None when no episode has one
    final_row: np.ndarray | None = None

    @property
    def n_episodes(self) -> int:
        return len(self.ends)

    def step_instructions(self) -> np.ndarray | None:
        """[steps] str: each step's episode instruction (None without instructions)."""
        if self.instruction is None:
            return None
        episode, _, _ = L.episode_index(self.ends)
        return np.asarray(self.instruction, dtype=object)[episode]


def collect_hint(task: str, cameras) -> str:
    return f"robot-rl-collect task={task} ... env.cameras=[{','.join(cameras)}]"


def camera_shapes(stores: Sequence, cameras: Sequence[str], task: str) -> dict[str, list[int]]:
    """{"images/<camera>": [H, W, 3]} of the stores' frames of `cameras`; RewardDataError naming a store that
    lacks one (and how to record it) or frame sizes that differ between stores."""
    from robot_rl.policies.base import image_key

    out: dict[str, list[int]] = {}
    for store in stores:
        have = sorted(k[len("obs/images/"):] for k in store.keys if k.startswith("obs/images/"))
        for cam in cameras:
            key = f"obs/{image_key(cam)}"
            if key not in store.keys:
                raise RewardDataError(
                    f"episode store {store.path} lacks {key} (its cameras: {have}); record the frames with "
                    f"{collect_hint(task, [c[len('images/'):] if c.startswith('images/') else c for c in cameras])}")
            shape = [int(x) for x in store.keys[key].shape]
            prev = out.setdefault(image_key(cam), shape)
            if prev != shape:
                raise RewardDataError(f"{key}: frames are {prev[0]}x{prev[1]} in one store and {shape[0]}x{shape[1]} "
                                      f"in {store.path}; record every store with the same env.image_size")
    return out


def episode_instructions(store) -> np.ndarray:
    """Per-episode instructions of a store (str object array); RewardDataError when one is empty."""
    text = np.array([str(x) for x in store.episode_attr("instruction")], dtype=object)
    empty = [i for i, t in enumerate(text) if not t.strip()]
    if empty:
        raise RewardDataError(
            f"episode store {store.path}: {len(empty)} of {len(text)} episodes have an empty instruction (first: "
            f"episode {empty[0]}); a reward model with inputs.instruction=true reads each episode's instruction: "
            "record a task that gives instructions, or set inputs.instruction=false")
    return text


def vector_keys(stores: Sequence) -> dict[str, int]:
    """Vector observation keys (not frames) every store holds with one per-step shape [dim]: key -> dim."""
    common = None
    for store in stores:
        keys = {k[len("obs/"):]: tuple(spec.shape) for k, spec in store.keys.items()
                if k.startswith("obs/") and not k.startswith("obs/images/") and len(spec.shape) == 1}
        common = keys if common is None else {k: v for k, v in common.items() if keys.get(k) == v}
    return {k: int(v[0]) for k, v in sorted((common or {}).items())}


def frame_features(frames: dict[str, np.ndarray], size: int = 8, chunk: int = 2048) -> np.ndarray:
    """[steps, cameras * size * size * 3] float32: each camera's frames average-pooled to size x size, in [0, 1]
    (the neighbour-search space of stores without vector observations)."""
    parts = []
    for k in sorted(frames):
        f = frames[k]
        out = [torch.nn.functional.adaptive_avg_pool2d(torch.from_numpy(f[i:i + chunk]).permute(0, 3, 1, 2).float(),
                                                       size).flatten(1) / 255.0 for i in range(0, len(f), chunk)]
        parts.append(torch.cat(out).numpy())
    return np.concatenate(parts, axis=1).astype(np.float32)


SELECTOR = re.compile(r"^([A-Za-z_][\w/]*)(?:\[(\d+)(?::(\d+))?\]|\.(\w+))?$")


def task_progress_features(task: str) -> tuple[str, ...]:
    """The task's `progress_features` selectors (sim task registry), () for a task without them."""
    from robot_rl.sim.tasks import TASKS

    return tuple(getattr(TASKS.get(task), "progress_features", ()) or ())


def task_fields(task: str, available: dict[str, int]) -> dict[str, dict[str, slice]]:
    """The named fields (sim/task.py Task.obs_fields) of the vector observations `available` (key -> dim) of `task`:
    its object fields, and proprio's for the arm whose joint count its size gives; {} for a task without them."""
    from robot_rl.sim.task import fields_of, proprio_fields
    from robot_rl.sim.tasks import TASKS

    out = {}
    cls = TASKS.get(task) if task in TASKS else None
    if cls is not None and getattr(cls, "object_fields", ()):
        out["object"] = fields_of(cls.object_fields)
    if cls is not None and available.get("proprio", 0) >= 8 and available["proprio"] % 2 == 0:
        out["proprio"] = proprio_fields((available["proprio"] - 6) // 2)
    return out


def parse_selectors(selectors: Sequence[str], available: dict[str, int],
                    fields: dict[str, dict[str, slice]] | None = None) -> list[tuple[str, str, slice]]:
    """("key[i:j]" | "key[i]" | "key" | "key.field") -> (selector, key, column slice), checked against `available`
    (key -> dim) and `fields` (key -> {field: slice}, task_fields'); RewardDataError naming the selector and the key's
    size or fields."""
    out = []
    for sel in selectors:
        m = SELECTOR.match(str(sel).strip())
        if m is None:
            raise RewardDataError(f"failure_neighbor_keys: {sel!r} is not a selector (key, key[i], key[i:j] or "
                                  "key.field, e.g. object[7:11] or object.minus_ee)")
        key, a, b, name = m[1], m[2], m[3], m[4]
        if key not in available:
            raise RewardDataError(f"failure_neighbor_keys: {[key]} are not vector observations of every store (they "
                                  f"hold {sorted(available)})")
        dim = available[key]
        if name is not None:
            named = (fields or {}).get(key, {})
            if name not in named:
                raise RewardDataError(f"failure_neighbor_keys: {sel!r}: {key!r} has no field {name!r} (its fields: "
                                      f"{sorted(named) or 'none known; select columns, e.g. ' + key + '[0:3]'})")
            if named[name].stop > dim:
                raise RewardDataError(f"failure_neighbor_keys: {sel!r} is columns {named[name].start}:"
                                      f"{named[name].stop} of {key!r}, which has {dim}")
            out.append((str(sel).strip(), key, named[name]))
            continue
        lo = 0 if a is None else int(a)
        hi = dim if a is None else (lo + 1 if b is None else int(b))
        if not (0 <= lo < hi <= dim):
            raise RewardDataError(f"failure_neighbor_keys: {sel!r} selects columns {lo}:{hi} of {key!r}, which has "
                                  f"{dim}")
        out.append((str(sel).strip(), key, slice(lo, hi)))
    return out


def load_episodes(stores: Sequence, spec: RewardSpec, neighbor_keys: Sequence[str] | str | None = "auto") -> Episodes:
    """Concatenate the episodes of opened EpisodeStores, checked against `spec` (task, observation keys, cameras,
    instructions), with the failed-state neighbour search's features (`neighbor_keys`: selectors "key", "key[i]",
    "key[i:j]", "key.field" of vector observations; "auto": the task's progress_features, else every vector key; None: every
    vector key the stores hold; none at all: frame_features of the spec's cameras)."""
    for store in stores:
        if store.n_episodes == 0:
            raise RewardDataError(f"episode store {store.path} has no episodes")
        tasks = sorted(set(map(str, store.episode_attr("task"))))
        if tasks != [spec.task]:
            raise RewardDataError(f"episode store {store.path} holds task(s) {tasks}, the reward model is for "
                                  f"task {spec.task!r}; set env.task=... to match or pass a store of {spec.task!r}")
    shapes = camera_shapes(stores, list(spec.image_shapes), spec.task)
    for k, want in spec.image_shapes.items():
        if shapes[k] != list(want):
            raise RewardDataError(f"the reward model reads {k} {want[0]}x{want[1]}, the stores hold "
                                  f"{shapes[k][0]}x{shapes[k][1]} frames")
    available = vector_keys(stores)
    if isinstance(neighbor_keys, str) and neighbor_keys == "auto":
        task_cols = task_progress_features(spec.task)
        task_keys = {SELECTOR.match(s)[1] for s in task_cols}
        neighbor_keys = list(task_cols) if task_cols and task_keys <= set(available) else None
    if neighbor_keys is None:
        neighbor_keys = list(available)
    columns = parse_selectors(neighbor_keys, available, task_fields(spec.task, available))
    neighbor_keys = list(dict.fromkeys(key for _, key, _ in columns))
    if not neighbor_keys and not spec.image_shapes:
        raise RewardDataError("the stores hold no vector observations and the model reads no camera: there is "
                              "nothing to compare failed states with successful ones")
    extra = [k for k in neighbor_keys if k not in spec.obs_dims]  # read for the labels only
    obs = {k: [] for k in [*spec.obs_dims, *spec.image_shapes]}
    side = {k: [] for k in extra}
    ends, success, source, which, gt_p, gt_s, text, offset, finals = [], [], [], [], [], [], [], 0, []
    for i, store in enumerate(stores):
        for k, d in spec.obs_dims.items():
            key = f"obs/{k}"
            if key not in store.keys:
                raise RewardDataError(f"episode store {store.path} lacks {key} (it has {sorted(store.keys)})")
            if tuple(store.keys[key].shape) != (d,):
                raise RewardDataError(f"episode store {store.path}: {key} has per-step shape "
                                      f"{tuple(store.keys[key].shape)}, task {spec.task!r} observes ({d},)")
            obs[k].append(store.read(key).astype(np.float32))
        for k in spec.image_shapes:
            obs[k].append(store.read(f"obs/{k}"))  # uint8, as stored
        for k in extra:
            side[k].append(store.read(f"obs/{k}").astype(np.float32))
        if spec.instruction:
            text.append(episode_instructions(store))
        progress = store.read("progress").astype(np.float32) if "progress" in store.keys else None
        # NaN: an env that does not know its progress (env.backend=gymnasium): no ground truth to compare with
        gt_p.append(None if progress is None or np.isnan(progress).any() else progress)
        gt_s.append(store.read("success").astype(bool) if "success" in store.keys else None)
        final = final_observations(store, [*spec.obs_dims, *extra]) if not spec.image_shapes else None
        if final is not None:  # one more row per episode: the observation it ended in (gt: the last step's)
            at = store.episode_ends
            for part in (obs, side):
                for k in part:
                    part[k][-1] = np.insert(part[k][-1], at, final[k], axis=0)
            for g in (gt_p, gt_s):
                if g[-1] is not None:
                    g[-1] = np.insert(g[-1], at, g[-1][at - 1], axis=0)
        n_rows = store.n_steps + (store.n_episodes if final is not None else 0)
        ends.append(store.episode_ends + np.arange(1, store.n_episodes + 1) * (final is not None) + offset)
        row = np.zeros(n_rows, bool)
        if final is not None:
            row[ends[-1] - offset - 1] = True
        finals.append(row)
        offset += n_rows
        success.append(store.episode_attr("success").astype(bool))
        source.append(np.array([str(s) for s in store.episode_attr("source")]))
        which.append(np.full(store.n_episodes, i))
    cat = lambda parts: None if any(p is None for p in parts) else np.concatenate(parts)  # noqa: E731
    obs = {k: np.concatenate(v) for k, v in obs.items()}
    side = {k: np.concatenate(v) for k, v in side.items()}
    if columns:
        keys = tuple(sel for sel, _, _ in columns)
        features = np.concatenate([(obs[k] if k in obs else side[k])[:, cols] for _, k, cols in columns], axis=1)
    else:
        keys = tuple(f"{k}@8x8" for k in sorted(spec.image_shapes))
        features = frame_features({k: obs[k] for k in spec.image_shapes})
    final_row = np.concatenate(finals)
    return Episodes(obs, np.concatenate(ends), np.concatenate(success), np.concatenate(source), np.concatenate(which),
                    cat(gt_p), cat(gt_s), np.concatenate(text) if spec.instruction else None, features, keys,
                    final_row if final_row.any() else None)


def final_observations(store, keys) -> dict[str, np.ndarray] | None:
    """{key: [episodes, dim]} of the observations the store's episodes ended in (their metadata's final_obs, which
    robot-rl-collect records), or None unless every episode has every key (older stores, other recorders)."""
    import json

    from robot_rl.data.episode import FINAL_OBS

    out = {k: [] for k in keys}
    for meta in store.episode_attr("metadata"):
        final = json.loads(str(meta)).get(FINAL_OBS) or {}
        for k in keys:
            if k not in final:
                return None
            out[k].append(final[k])
    out = {k: np.asarray(v, np.float32) for k, v in out.items()}
    if any(v.shape != (store.n_episodes, *store.keys[f"obs/{k}"].shape) for k, v in out.items()):
        return None  # a final observation of another size than the steps': not this store's
    return out


def rollout_policies(stores: Sequence) -> list[dict]:
    """The policies whose rollouts (source "policy") the stores hold, from the episodes' collect metadata:
    [{"policy": path as recorded, "sha256": weights hash or None (stores recorded before hashes were), "episodes",
    "failed"}], one entry per (hash, path). A reward model keeps the list (info) so residual RL can tell whether
    the base it refines is among them (robot_rl.reward.model.rollout_mismatch)."""
    import json

    out: dict[tuple, dict] = {}
    for store in stores:
        source = store.episode_attr("source")
        success = store.episode_attr("success").astype(bool)
        for meta, src, ok in zip(store.episode_attr("metadata"), source, success):
            if str(src) != "policy":
                continue
            meta = json.loads(str(meta))  # the store validated it as a JSON object when it was appended
            key = (meta.get("policy_sha256"), meta.get("policy"))
            entry = out.setdefault(key, {"policy": key[1], "sha256": key[0], "episodes": 0, "failed": 0})
            entry["episodes"] += 1
            entry["failed"] += int(not ok)
    return list(out.values())


def check_outcomes(data: Episodes, task: str) -> None:
    """Both outcomes must be present: successes anchor progress and positives, failures are the negatives."""
    n_ok = int(data.success.sum())
    n_fail = data.n_episodes - n_ok
    if n_fail < 2:
        raise RewardDataError(
            f"the data holds {n_fail} failed episode(s) of {data.n_episodes}: the success classifier needs failures "
            f"(at least 2, some held out), and the progress model needs them so that stalling is not rewarded; "
            + FAILURE_HELP.format(task=task))
    if n_ok < MIN_SUCCESSES:
        raise RewardDataError(
            f"the data holds {n_ok} successful episode(s) of {data.n_episodes}: progress labels and classifier "
            f"positives come from successes; add demonstrations (robot-rl-collect task={task} out=DEMOS)")
