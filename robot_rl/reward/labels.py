"""Training targets of the reward models, from episode boundaries, episode outcomes and observations only.

No simulator ground truth is read (no per-step `progress`, `reward` or `success`): the same labels can be
made for robot recordings, where the outcome of an episode is all a human annotates.

Progress target of step t of an episode of T steps:
    successful episode:  t / T     time within the episode; its (unstored) success state would be 1
    failed episode:      the mean target of the `k` most similar states of successful episodes (Euclidean
                         distance of normalized observation columns: the task's progress_features, e.g. lift's
                         cube - gripper, height to go and gripper width), times exp(-distance_scale * (d / d_med)^2),
                         d = their mean distance, d_med = its median over all failed states
Why not time on failures: a later state of a failed episode is not closer to success (the robot may stall
or undo), and t/T there would pay for both. Why not 0: failed episodes do make partial progress (reach,
grasp), and a model pushed to 0 on them learns "which policy is acting" instead of "how far the task is"
(lift, held-out Spearman of Phi with true progress: 0.10 with zero labels, 0.73 trained on successes
alone, 0.81-0.85 with labels transferred over every observation column, 0.89 over the task's columns). Transferring the label of the nearest successful states gives a
state the progress a successful execution has there, whatever time it is reached at: standing still keeps
the label, undoing returns to an earlier state's label. The distance discount lowers states no successful
episode comes near (arm raised without the cube, cube knocked away): the configurations failures end in,
which a model trained on successes alone extrapolates to high progress. Phi is a function of the state
only, so with potential-based shaping (shaping.py) stalling earns nothing and undoing pays back what was
gained. Distances are taken between vector observations (robot_rl/reward/episodes.py: the task's progress_features
by default, else every vector key the stores hold, whatever the model reads; frames pooled to 8x8 when there are
none). Over every key, the 14 joint angles and velocities dominate the distance and say little about how far
the task is; the labels themselves then correlate 0.82-0.84 with true progress on lift, 0.89-0.90 over the
task's columns (quickstart data, 3 splits). For a model that reads
the instruction, the nearest states come from successful episodes with the same instruction (`groups`):
"progress" is toward the named goal, and a state that completes another goal (the other cube lifted) is
not near success of this one, however close it is to that goal's successful states.

Success target: the last `positive_frames` steps of a successful episode are positives (with
terminate-on-success the episode ends at its first success; the success state itself is the episode's
final observation, which the store does not keep, so the positives are the states just before it);
the `gap_frames` steps before them are left out (nearly successful, neither label is right); all other
steps of successful episodes and every step of failed episodes are negatives, failure endings included:
they are the hard negatives a reward hacker would exploit.
"""

from __future__ import annotations

import numpy as np


def episode_index(ends: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(episode of each step, step within its episode t, length T of its episode), each [total_steps]."""
    ends = np.asarray(ends, np.int64)
    lengths = np.diff(np.concatenate([[0], ends]))
    if len(lengths) and lengths.min() < 1:
        raise ValueError("episode_ends must be strictly increasing from >= 1")
    episode = np.repeat(np.arange(len(ends)), lengths)
    starts = np.repeat(ends - lengths, lengths)
    return episode, np.arange(len(episode)) - starts, np.repeat(lengths, lengths)


def time_targets(ends: np.ndarray, success: np.ndarray) -> np.ndarray:
    """t / T per step [total_steps] in successful episodes, 0 in failed ones (their target comes from
    `transfer_targets`)."""
    success = np.asarray(success, bool)
    episode, t, length = episode_index(ends)
    if len(success) != len(np.asarray(ends)):
        raise ValueError(f"{len(success)} success flags for {len(ends)} episodes")
    return np.where(success[episode], t / length, 0.0).astype(np.float32)


def transfer_targets(features: np.ndarray, ref_features: np.ndarray, ref_targets: np.ndarray, k: int = 25,
                     distance_scale: float = 0.1, chunk: int = 2048) -> np.ndarray:
    """Targets of query states [Q, D] from reference states [R, D] (successful episodes, targets [R]): the mean
    target of the k nearest, times exp(-distance_scale * (d / median d)^2) with d their mean distance. [Q]"""
    y, d = nearest_targets(features, ref_features, ref_targets, k, chunk)
    return discount(y, d, distance_scale)


def discount(y: np.ndarray, d: np.ndarray, distance_scale: float) -> np.ndarray:
    """y * exp(-distance_scale * (d / median d)^2), float32 [Q]."""
    if distance_scale > 0 and len(d):
        y = y * np.exp(-distance_scale * (d / max(float(np.median(d)), 1e-8)) ** 2)
    return np.asarray(y, np.float32)


def nearest_targets(features: np.ndarray, ref_features: np.ndarray, ref_targets: np.ndarray, k: int = 25,
                    chunk: int = 2048) -> tuple[np.ndarray, np.ndarray]:
    """(mean target, mean distance) of the k nearest reference states of each query state, each [Q]."""
    import torch

    if len(ref_features) == 0:
        raise ValueError("transfer_targets needs reference states (steps of successful episodes)")
    if len(features) == 0:
        return np.zeros(0, np.float32), np.zeros(0, np.float32)
    k = min(int(k), len(ref_features))
    ref = torch.as_tensor(np.asarray(ref_features, np.float32))
    ref_y = torch.as_tensor(np.asarray(ref_targets, np.float32))
    mean_y, mean_d = [], []
    for i in range(0, len(features), chunk):
        q = torch.as_tensor(np.asarray(features[i:i + chunk], np.float32))
        d, idx = torch.cdist(q, ref).topk(k, largest=False)
        mean_y.append(ref_y[idx].mean(1))
        mean_d.append(d.mean(1))
    return torch.cat(mean_y).numpy(), torch.cat(mean_d).numpy()


def progress_targets(ends: np.ndarray, success: np.ndarray, features: np.ndarray, reference: np.ndarray,
                     k: int = 25, distance_scale: float = 0.1, groups: np.ndarray | None = None) -> np.ndarray:
    """Progress target per step [total_steps] (module docstring): t / T on successful episodes, transferred
    from the successful steps where `reference` [total_steps] is True (e.g. the training split) on failed
    ones. `features` [total_steps, D]: normalized observations. `groups` [episodes] (e.g. instruction ids):
    a failed state's neighbours come from its own group's successes (all successes when its group has none);
    the distance discount's median is over every failed state either way."""
    y = time_targets(ends, success)
    episode, _, _ = episode_index(ends)
    won = np.asarray(success, bool)[episode]
    ref = np.asarray(reference, bool) & won
    if groups is None:
        y[~won] = transfer_targets(features[~won], features[ref], y[ref], k, distance_scale)
        return y
    group = np.asarray(groups)[episode]
    mean_y, mean_d = np.zeros(len(y), np.float32), np.zeros(len(y), np.float32)
    for g in np.unique(group[~won]):
        q = ~won & (group == g)
        r = ref & (group == g)
        r = r if r.any() else ref
        mean_y[q], mean_d[q] = nearest_targets(features[q], features[r], y[r], k)
    y[~won] = discount(mean_y[~won], mean_d[~won], distance_scale)
    return y


def success_targets(ends: np.ndarray, success: np.ndarray, positive_frames: int = 2,
                    gap_frames: int = 3) -> tuple[np.ndarray, np.ndarray]:
    """(label, used) per step [total_steps]: label True on the last `positive_frames` steps of successful
    episodes (where an episode ends in its final observation, that success state is the last of them); `used` False
    on the `gap_frames` steps before those (left out of training and evaluation)."""
    if positive_frames < 1 or gap_frames < 0:
        raise ValueError(f"positive_frames={positive_frames} must be >= 1 and gap_frames={gap_frames} >= 0")
    success = np.asarray(success, bool)
    if len(success) != len(np.asarray(ends)):
        raise ValueError(f"{len(success)} success flags for {len(ends)} episodes")
    episode, t, length = episode_index(ends)
    from_end = length - t  # 1 on the last step
    won = success[episode]
    label = won & (from_end <= positive_frames)
    used = ~(won & (from_end > positive_frames) & (from_end <= positive_frames + gap_frames))
    return label, used


def split_episodes(success: np.ndarray, fractions: dict[str, float], seed: int) -> dict[str, np.ndarray]:
    """Episode indices per split (e.g. {"val": 0.1, "test": 0.2}; the rest is "train"), drawn separately
    from successful and failed episodes so every split gets both when there are enough."""
    success = np.asarray(success, bool)
    rng = np.random.default_rng(seed)
    out = {name: [] for name in ["train", *fractions]}
    for group in (np.nonzero(success)[0], np.nonzero(~success)[0]):
        group = rng.permutation(group)
        start = 0
        for name, frac in fractions.items():
            k = int(round(frac * len(group)))
            if frac > 0 and k == 0 and len(group) >= len(fractions) + 1:
                k = 1  # a small group still reaches every held-out split
            out[name].append(group[start:start + k])
            start += k
        out["train"].append(group[start:])
    return {k: np.sort(np.concatenate(v)).astype(np.int64) for k, v in out.items()}
