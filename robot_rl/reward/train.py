"""Training and evaluation of a reward model (progress model + success classifier): robot-rl-train-reward.

    data = load_episodes([demos, rollouts], spec)          # steps of every store, episode outcomes
    result = train_reward(run_dir, cfg, data, spec, log)    # -> reward_model/, metrics, plots

Reads top-down:
  1. split episodes into train / val / test, stratified by outcome (robot_rl.reward.labels.split_episodes);
  2. targets from episode boundaries, outcomes and observations only (labels.py): t/T on successes and the
     distance-discounted target of the nearest successful states on failures for progress, last frames of
     successes vs everything else for the classifier; data without failed episodes stops here. The nearest
     states are searched in the stores' vector observations (`Episodes.features`: by default the task's
     `progress_features`, the columns that say where the object is relative to the gripper and the goal and how
     open the gripper is; else every vector key; or `failure_neighbor_keys`), whatever the model reads: a robot
     records them too (proprio, an object pose where one is estimated). Joint angles and velocities would
     dominate a distance over every key while saying little about progress (lift's labels: Spearman 0.82-0.84
     with ground truth over every key, 0.89-0.90 over the task's columns, 3 splits). Stores without vector
     observations fall back to the frames, average-pooled to 8x8 per camera (`frame_features`).
     A model that reads the instruction takes a failed state's neighbours from successes of its instruction;
  3. fit each network with AdamW + cosine decay on minibatches of training states (BCE; the classifier's
     rare positives are up-weighted to balance the classes). Frames stay uint8 in memory and are indexed per
     batch (never copied per split); in training they are randomly shifted (model.ImageFeatures), and the
     observation noise goes on vector keys only;
  4. calibrate the threshold on the val split: the highest one that still detects `min_tpr` of its positive
     states (the fewest false alarms at that recall; a threshold set from the negatives alone lands in the
     noise floor of a confident classifier, measured 3e-5 on lift, and fires on 21% of failed episodes);
  5. evaluate on the test split: Spearman of Phi with the simulator's ground-truth progress (read here and
     only here, when the store recorded it), classifier AUROC, false-positive / true-positive rates at the
     threshold, per-episode false alarms; save reward_model/ (robot_rl.reward.model). Both networks are run
     on the val and test steps only.
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch

from robot_rl.reward import labels as L
from robot_rl.reward.episodes import FAILURE_HELP, Episodes, RewardDataError, check_outcomes
from robot_rl.reward.metrics import auroc, rates, spearman, threshold_for_tpr
from robot_rl.reward.model import CHECKPOINT_DIR, IMAGE_ENCODER, RewardModel, RewardSpec, image_encoder_options

# steps / batch_size "auto": (state-only, with cameras); frames through the ResNet are the cost on CPU
AUTO = {"steps": (3000, 500), "batch_size": (512, 64)}


@dataclasses.dataclass
class RewardInputs:
    """What both networks read (robot-rl-train-reward inputs.*; the RewardSpec is built from it and the stores)."""

    state: tuple[str, ...] | None = None  # vector observation keys, e.g. [proprio]; None = every key; [] = none
    cameras: tuple[str, ...] = ()  # camera frames, e.g. [front,wrist]: the stores need obs/images/<camera>
    # the episode's instruction: true | false | auto (= the task's instruction names the episode's goal, e.g.
    # color_lift; lift's are paraphrases of one goal)
    instruction: Literal["true", "false", "auto"] | bool = "auto"

    def __post_init__(self):
        self.instruction = {True: "true", False: "false"}.get(self.instruction, self.instruction)
        if self.instruction not in ("true", "false", "auto"):
            raise ValueError(f"inputs.instruction={self.instruction!r} must be one of true, false, auto")
        for name in ("state", "cameras"):
            keys = getattr(self, name)
            if keys is not None and not all(isinstance(k, str) and k for k in keys):
                raise ValueError(f"inputs.{name}={list(keys)!r} must be a list of names, e.g. "
                                 + ("[proprio]" if name == "state" else "[front,wrist]"))
        if len(set(self.cameras)) != len(self.cameras):
            raise ValueError(f"inputs.cameras={list(self.cameras)} names a camera twice")


@dataclasses.dataclass
class RewardTrainConfig:
    """Everything reward-model training reads; the one place its defaults live (robot-rl-train-reward's YAML
    and the quickstart's reward stage extend schema/train_reward)."""

    inputs: RewardInputs = dataclasses.field(default_factory=RewardInputs)
    # gradient steps per network (progress model, then success classifier); auto = 3000 state-only, 500 with
    # cameras (AUTO)
    steps: int | Literal["auto"] = "auto"
    batch_size: int | Literal["auto"] = "auto"  # auto = 512 state-only, 64 with cameras
    # camera encoder of both networks (model.IMAGE_ENCODER: channels, groups, grid, token_dim, shift, downsample)
    image_encoder: dict[str, Any] = dataclasses.field(default_factory=lambda: dict(IMAGE_ENCODER))
    lr: float = 1e-3  # AdamW, cosine decay to 0 over `steps`
    weight_decay: float = 1e-4
    hidden: tuple[int, ...] = (256, 256)  # MLP widths of both networks (LayerNorm + SiLU)
    # a failed state's progress target: mean t/T of its nearest successful states (failure_neighbors) times
    # exp(-scale * (distance / median distance)^2) (failure_distance_scale; 0 = no discount; labels.py)
    failure_neighbors: int = 50
    failure_distance_scale: float = 0.1
    # the neighbour search's columns: auto = the task's progress_features (every vector key for a task without
    # them), None = every vector key, or selectors [object.minus_ee,proprio[14]]; no vector keys in the stores:
    # frames pooled to 8x8
    failure_neighbor_keys: tuple[str, ...] | Literal["auto"] | None = "auto"
    obs_noise: float = 0.1  # training noise on normalized vector observations, in units of each dimension's std
    positive_frames: int = 2  # last steps of a successful episode labelled success
    gap_frames: int = 3  # steps before those left out of the classifier's data (nearly successful)
    min_tpr: float = 0.9  # threshold = the highest that detects this share of the val episodes' success states
    val_fraction: float = 0.1  # episodes for threshold calibration (stratified by outcome)
    test_fraction: float = 0.2  # held-out episodes for the reported metrics (stratified by outcome)
    log_every: int = 100  # gradient steps between TensorBoard points
    seed: int = 0  # split, minibatch and init seed

    def __post_init__(self):
        if isinstance(self.inputs, dict):
            self.inputs = RewardInputs(**self.inputs)
        self.hidden = tuple(int(h) for h in self.hidden)
        self.image_encoder = image_encoder_options(self.image_encoder)
        if isinstance(self.failure_neighbor_keys, str) and self.failure_neighbor_keys != "auto":
            raise ValueError(f"failure_neighbor_keys={self.failure_neighbor_keys!r} must be auto, null or a "
                             "list of selectors like [object, object.minus_ee, proprio[14]]")
        if isinstance(self.failure_neighbor_keys, (list, tuple)):
            self.failure_neighbor_keys = tuple(str(k) for k in self.failure_neighbor_keys)
        for name in AUTO:
            value = getattr(self, name)
            if value != "auto" and not (isinstance(value, int) and not isinstance(value, bool) and value >= 1):
                raise ValueError(f"{name}={value!r} must be a whole number >= 1 or auto")
        checks = [
            ("lr", self.lr > 0, "> 0"), ("weight_decay", self.weight_decay >= 0, ">= 0"),
            ("hidden", bool(self.hidden) and min(self.hidden) >= 1, "one or more widths >= 1"),
            ("obs_noise", self.obs_noise >= 0, ">= 0"), ("failure_neighbors", self.failure_neighbors >= 1, ">= 1"),
            ("failure_distance_scale", self.failure_distance_scale >= 0, ">= 0"),
            ("positive_frames", self.positive_frames >= 1, ">= 1"),
            ("gap_frames", self.gap_frames >= 0, ">= 0"), ("min_tpr", 0.0 < self.min_tpr <= 1.0, "in (0, 1]"),
            ("val_fraction", 0.0 < self.val_fraction < 1.0, "in (0, 1)"),
            ("test_fraction", 0.0 < self.test_fraction < 1.0, "in (0, 1)"),
            ("val_fraction + test_fraction", self.val_fraction + self.test_fraction < 1.0,
             "< 1 (training needs episodes)"),
            ("log_every", self.log_every >= 1, ">= 1"), ("seed", self.seed >= 0, ">= 0"),
        ]
        for name, ok, rule in checks:
            if not ok:
                value = getattr(self, name, self.val_fraction + self.test_fraction)
                value = list(value) if isinstance(value, tuple) else value
                raise ValueError(f"{name}={value!r} must be {rule}")

    def resolved(self, images: bool) -> "RewardTrainConfig":
        """This config with steps / batch_size "auto" replaced by the value for state-only or camera models."""
        return dataclasses.replace(self, **{k: pair[int(images)] for k, pair in AUTO.items()
                                            if getattr(self, k) == "auto"})


def step_mask(ends: np.ndarray, episodes: np.ndarray) -> np.ndarray:
    """Bool [steps]: the steps of the given episodes."""
    episode, _, _ = L.episode_index(ends)
    return np.isin(episode, episodes)


def _fit(net, obs: dict[str, np.ndarray], rows: np.ndarray, target: np.ndarray, weight: np.ndarray,
         cfg: RewardTrainConfig, rng: np.random.Generator, log, name: str, advance=None, on_log=None,
         instruction: np.ndarray | None = None, set_stats: bool = True) -> float:
    """Minibatch AdamW + cosine decay on weighted BCE(logit, target) over the steps `rows` [n] of `obs` (every
    step; target, weight [n]; instruction: [steps] str or None); returns the last logged loss. set_stats=False
    keeps the net's input normalization (fine-tuning a trained net: robot_rl/reward/online.py)."""
    x = {k: torch.from_numpy(v) for k, v in obs.items()}
    rows_t = torch.from_numpy(np.asarray(rows, np.int64))
    y, w = torch.from_numpy(target.astype(np.float32)), torch.from_numpy(weight.astype(np.float32))
    if set_stats:
        for k, enc in net.encoder.enc.items():
            if hasattr(enc, "scale"):  # vector keys: normalization from the training steps (frames need none)
                enc.set_stats(obs[k][rows])
        if instruction is not None:
            net.encoder.set_text_stats(instruction[rows])
    from diffusers.optimization import get_cosine_schedule_with_warmup

    opt = torch.optim.AdamW(net.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    sched = get_cosine_schedule_with_warmup(opt, num_warmup_steps=0, num_training_steps=cfg.steps)
    n, losses, last = len(y), [], float("nan")
    net.train()
    for step in range(1, cfg.steps + 1):
        idx = torch.from_numpy(rng.integers(0, n, size=min(cfg.batch_size, n)))
        steps = rows_t[idx]
        batch = {k: v[steps] for k, v in x.items()}
        if cfg.obs_noise > 0:  # noise in normalized units: every key gets the same relative jitter
            batch = {k: v + cfg.obs_noise * net.encoder.enc[k].scale * torch.randn_like(v)
                     if hasattr(net.encoder.enc[k], "scale") else v for k, v in batch.items()}  # not on frames
        logit = net(batch, None if instruction is None else instruction[steps.numpy()])
        loss = (torch.nn.functional.binary_cross_entropy_with_logits(logit, y[idx], reduction="none") * w[idx]).sum()
        loss = loss / w[idx].sum().clamp_min(1e-8)
        if not torch.isfinite(loss):
            raise FloatingPointError(f"{name} loss is {loss.item()} at step {step}; lower lr=")
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(net.parameters(), 1.0)
        opt.step()
        sched.step()
        losses.append(float(loss.detach()))
        if step % cfg.log_every == 0 or step == cfg.steps:
            last = float(np.mean(losses))
            log.scalar(f"train/{name}_loss", last, step)
            losses = []
            if on_log is not None:
                on_log(step)
                net.train()
        if advance is not None:
            advance(1)
    net.eval()
    return last


def progress_metrics(phi: np.ndarray, data: Episodes, episodes: np.ndarray) -> dict:
    """Phi against ground-truth progress (when recorded) and against time in failed episodes, on `episodes`."""
    episode, t, _ = L.episode_index(data.ends)
    mask = np.isin(episode, episodes)
    out = {"episodes": int(len(episodes)), "states": int(mask.sum()), "mean_phi": float(phi[mask].mean())}
    failed = [e for e in episodes if not data.success[e]]
    # Spearman(Phi, t) inside failed episodes: how much Phi grows just by time passing there (stalling).
    per_fail = [spearman(phi[episode == e], t[episode == e]) for e in failed]
    out["failed_time_spearman_mean"] = float(np.nanmean(per_fail)) if failed else None
    won = [e for e in episodes if data.success[e]]
    out["success_end_phi_mean"] = float(np.mean([phi[data.ends[e] - 1] for e in won])) if won else None
    out["failure_end_phi_mean"] = float(np.mean([phi[data.ends[e] - 1] for e in failed])) if failed else None
    if data.gt_progress is None:
        out["spearman"] = None
        out["note"] = "the stores hold no ground-truth progress: Spearman not computed"
        return out
    gt = data.gt_progress
    out["spearman"] = spearman(phi[mask], gt[mask])
    for name, pick in (("demos", data.source != "policy"), ("rollouts", data.source == "policy"),
                       ("successful", data.success), ("failed", ~data.success)):
        sel = mask & np.isin(episode, np.nonzero(pick)[0])
        out[f"spearman_{name}"] = spearman(phi[sel], gt[sel]) if sel.sum() > 1 else None
    per_ep = [spearman(phi[episode == e], gt[episode == e]) for e in episodes]
    out["spearman_per_episode_mean"] = float(np.nanmean(per_ep)) if len(per_ep) else None
    return out


def classifier_metrics(p: np.ndarray, data: Episodes, episodes: np.ndarray, threshold: float,
                       cfg: RewardTrainConfig) -> dict:
    """AUROC and rates at `threshold` on the labelled steps of `episodes`; per-episode false alarms."""
    label, used = L.success_targets(data.ends, data.success, cfg.positive_frames, cfg.gap_frames)
    episode, _, _ = L.episode_index(data.ends)
    mask = np.isin(episode, episodes)
    sel = mask & used
    out = {"auroc": auroc(p[sel], label[sel]), "threshold": threshold, **rates(p[sel], label[sel], threshold)}
    fired = p >= threshold
    failed = [e for e in episodes if not data.success[e]]
    won = [e for e in episodes if data.success[e]]
    # what RL sees: a failed episode in which the classifier fires anywhere pays a false success
    out["failed_episodes_fired"] = float(np.mean([fired[episode == e].any() for e in failed])) if failed else None
    out["successful_episodes_detected"] = (float(np.mean([fired[data.ends[e] - cfg.positive_frames:data.ends[e]].any()
                                                          for e in won])) if won else None)
    if data.gt_success is not None:  # ground truth (evaluation only): the step reached a success state
        out["auroc_gt_all_states"] = auroc(p[mask], data.gt_success[mask])
    return out


def plot_progress(path: Path, phi: np.ndarray, data: Episodes, episodes: np.ndarray, title: str) -> Path | None:
    """Phi against ground-truth progress (test states) and Phi over time in a few test episodes, as a PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    episode, t, length = L.episode_index(data.ends)
    mask = np.isin(episode, episodes)
    panels = 2 if data.gt_progress is not None else 1
    fig, axes = plt.subplots(1, panels, figsize=(5 * panels, 4), squeeze=False)
    ax = axes[0, 0]
    for e in list(episodes[data.success[episodes]][:4]) + list(episodes[~data.success[episodes]][:4]):
        sel = episode == e
        ax.plot(t[sel], phi[sel], color="tab:green" if data.success[e] else "tab:red", alpha=0.7)
    ax.set_xlabel("step in episode")
    ax.set_ylabel("Phi (green: success, red: failure)")
    ax.set_ylim(-0.02, 1.02)
    if data.gt_progress is not None:
        ax = axes[0, 1]
        colors = np.where(data.success[episode[mask]], "tab:green", "tab:red")
        ax.scatter(data.gt_progress[mask], phi[mask], s=2, alpha=0.3, c=colors)
        ax.set_xlabel("ground-truth progress (evaluation only)")
        ax.set_ylabel("Phi")
    fig.suptitle(title)
    fig.tight_layout()
    tmp = path.with_name(f".{path.name}.tmp.png")
    fig.savefig(tmp, dpi=90)
    plt.close(fig)
    tmp.replace(path)
    return path


def train_reward(run_dir: Path, cfg: RewardTrainConfig, data: Episodes, spec: RewardSpec, log, bar=None,
                 info: dict | None = None) -> tuple[RewardModel, dict]:
    """Train both networks on `data`, calibrate, evaluate on held-out episodes, save run_dir/reward_model/."""
    run_dir = Path(run_dir)
    cfg = cfg.resolved(images=bool(spec.image_shapes))
    check_outcomes(data, spec.task)
    torch.manual_seed(cfg.seed)
    rng = np.random.default_rng(cfg.seed)
    splits = L.split_episodes(data.success, {"val": cfg.val_fraction, "test": cfg.test_fraction}, cfg.seed)
    if data.success[splits["train"]].all():
        raise RewardDataError("no failed episode is left for training after the val / test split; "
                              + FAILURE_HELP.format(task=spec.task))
    train_m = step_mask(data.ends, splits["train"])
    train_rows = np.nonzero(train_m)[0]
    text = data.step_instructions()  # [steps] str, or None
    if spec.instruction and text is None:
        raise RewardDataError("the reward model reads instructions and the data holds none")
    model = RewardModel.build(spec, cfg.hidden, cfg.image_encoder)
    task = bar.add_task("reward", total=2 * cfg.steps) if bar is not None else None
    advance = (lambda k: bar.advance(task, k)) if bar is not None else None
    t0 = time.perf_counter()

    # progress: t/T in successes, transferred from the nearest training successes in failures
    if data.features is not None:
        x = data.features.astype(np.float64)
    else:  # Episodes made by hand: the vector observations the model reads
        x = np.concatenate([data.obs[k] for k in sorted(spec.obs_dims)], axis=1).astype(np.float64)
    mu, sd = x[train_m].mean(0), np.maximum(x[train_m].std(0), 1e-3)
    groups = None  # a language model's neighbours: successes of the same instruction (labels.py)
    if spec.instruction and data.instruction is not None:
        groups = np.unique(np.asarray(data.instruction, dtype=str), return_inverse=True)[1]
    y = L.progress_targets(data.ends, data.success, ((x - mu) / sd).astype(np.float32), train_m,
                           cfg.failure_neighbors, cfg.failure_distance_scale, groups)
    del x
    val_m = step_mask(data.ends, splits["val"])
    val_obs = {k: v[val_m] for k, v in data.obs.items()}
    val_text = None if text is None else text[val_m]

    def log_progress(step):
        if data.gt_progress is not None:  # evaluation only: never reaches the loss
            log.scalar("val/progress_spearman", spearman(model.progress(val_obs, val_text), data.gt_progress[val_m]),
                       step)

    progress_loss = _fit(model.progress_net, data.obs, train_rows, y[train_m], np.ones(len(train_rows)), cfg, rng,
                         log, "progress", advance, log_progress, text)

    # success classifier: positives are rare (a few frames per success), balance the two classes
    label, used = L.success_targets(data.ends, data.success, cfg.positive_frames, cfg.gap_frames)
    sel = train_m & used
    n_pos = int(label[sel].sum())
    w = np.where(label[sel], (sel.sum() - n_pos) / max(n_pos, 1), 1.0)
    val_sel = val_m & used

    def log_success(step):
        log.scalar("val/success_auroc", auroc(model.success_prob(val_obs, val_text)[used[val_m]], label[val_sel]),
                   step)

    success_loss = _fit(model.success_net, data.obs, np.nonzero(sel)[0], label[sel].astype(np.float32), w, cfg,
                        rng, log, "success", advance, log_success, text)
    train_time = time.perf_counter() - t0

    # both networks on the held-out steps only (nan elsewhere: never read below)
    eval_rows = np.nonzero(val_m | step_mask(data.ends, splits["test"]))[0]
    eval_obs = {k: v[eval_rows] for k, v in data.obs.items()}
    eval_text = None if text is None else text[eval_rows]
    p_all = np.full(len(train_m), np.nan, np.float32)
    p_all[eval_rows] = model.success_prob(eval_obs, eval_text)

    # threshold: calibrated on the val episodes' positives (their rates are reported below)
    pos_val = p_all[val_sel & label]
    if pos_val.size == 0:
        raise RewardDataError("the val split has no successful episode to calibrate the threshold on; raise "
                              "val_fraction= or add successful episodes")
    model.threshold = threshold_for_tpr(pos_val, cfg.min_tpr)

    phi_all = np.full(len(train_m), np.nan, np.float32)
    phi_all[eval_rows] = model.progress(eval_obs, eval_text)
    del eval_obs
    test = splits["test"]
    metrics = {
        "progress": progress_metrics(phi_all, data, test),
        "classifier": classifier_metrics(p_all, data, test, model.threshold, cfg),
        "classifier_val": classifier_metrics(p_all, data, splits["val"], model.threshold, cfg),
        "splits": {k: {"episodes": int(len(v)), "successful": int(data.success[v].sum())} for k, v in splits.items()},
        "train_states": int(train_m.sum()),
        "classifier_train_positives": n_pos,
        "progress_final_loss": progress_loss,
        "success_final_loss": success_loss,
        "train_time_s": train_time,
        "inputs": {"state": sorted(spec.obs_dims), "cameras": sorted(spec.image_shapes),
                   "instruction": spec.instruction},
        "failure_neighbor_features": list(data.feature_keys) if data.features is not None else sorted(spec.obs_dims),
    }
    model.info = {**(info or {}), "test": {"spearman": metrics["progress"]["spearman"],
                                           "auroc": metrics["classifier"]["auroc"],
                                           "fpr": metrics["classifier"]["fpr"]},
                  "success_labels": {"positive_frames": cfg.positive_frames, "gap_frames": cfg.gap_frames,
                                     "min_tpr": cfg.min_tpr}}
    model.save(run_dir / CHECKPOINT_DIR)
    plot_progress(run_dir / "progress.png", phi_all, data, test, f"progress model {spec.task} (test episodes)")
    log.plot(run_dir / "curves.png", ["train/progress_loss", "val/progress_spearman", "train/success_loss",
                                      "val/success_auroc"], title=f"reward model {spec.task}")
    return model, metrics
