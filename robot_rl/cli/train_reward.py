"""robot-rl-train-reward: train the progress model and success classifier of a task from episode stores.

    robot-rl-train-reward task=lift data=runs/results/lift-demos.zarr rollouts=runs/results/lift-rollouts.zarr

Writes runs/train_reward/<timestamp>-<name>/ with reward_model/ (what residual RL's reward_model= loads),
config.yaml, metrics.json (held-out Spearman of Phi with ground-truth progress, classifier AUROC, rates at
the calibrated threshold), TensorBoard events, curves.png and progress.png (see robot_rl/reward/train.py).
"""

from __future__ import annotations

import dataclasses
import time

import hydra
from omegaconf import DictConfig, OmegaConf

from robot_rl.cli.common import env_config, fail, make_env, progress_bar, set_torch_threads, whole
from robot_rl.run_dir import current_run_dir, write_config, write_metrics


def _configs(cfg: DictConfig):
    from robot_rl.reward.train import RewardTrainConfig

    env_cfg = env_config(cfg.env)
    if not isinstance(cfg.data, str) or not cfg.data:
        fail("data=PATH must name an episode store of demonstrations (robot-rl-collect out=PATH writes one)")
    if cfg.rollouts is not None and not (isinstance(cfg.rollouts, str) and cfg.rollouts):
        fail(f"rollouts={cfg.rollouts!r} must be an episode store path (robot-rl-collect policy=... out=PATH) or null")
    for k in ("steps", "batch_size", "log_every", "positive_frames", "failure_neighbors"):
        whole(k, cfg[k], 1)
    for k in ("gap_frames", "seed", "torch_threads"):
        whole(k, cfg[k], 0)
    fields = {f.name for f in dataclasses.fields(RewardTrainConfig)}
    values = {k: v for k, v in OmegaConf.to_container(cfg, resolve=True).items() if k in fields}
    for k in ("lr", "weight_decay", "obs_noise", "min_tpr", "val_fraction", "test_fraction", "failure_distance_scale"):
        if not (isinstance(values[k], (int, float)) and not isinstance(values[k], bool)):
            fail(f"{k}={values[k]!r} must be a number")
    if not (isinstance(values["hidden"], list) and all(isinstance(h, int) and h >= 1 for h in values["hidden"])):
        fail(f"hidden={values['hidden']!r} must be a list of layer widths >= 1, e.g. [256,256]")
    try:
        return env_cfg, RewardTrainConfig(**values)
    except ValueError as e:
        fail(str(e))


def _open(path: str, what: str):
    from robot_rl.data import EpisodeStore, StoreError

    try:
        return EpisodeStore.open(path)
    except StoreError as e:
        fail(f"{what}={path}: {e}")


@hydra.main(version_base=None, config_path="pkg://configs", config_name="train_reward")
def main(cfg: DictConfig) -> None:
    env_cfg, train_cfg = _configs(cfg)
    set_torch_threads(int(cfg.torch_threads))
    stores = [_open(cfg.data, "data")] + ([_open(cfg.rollouts, "rollouts")] if cfg.rollouts is not None else [])

    from robot_rl.reward.model import CHECKPOINT_DIR, RewardSpec
    from robot_rl.reward.train import RewardDataError, load_episodes, train_reward
    from robot_rl.run_log import RunLog

    env = make_env(env_cfg)  # only for the task's observation spec
    try:
        spec = RewardSpec(task=env_cfg.task, obs_dims=dict(env.obs_dims))
    finally:
        env.close()
    try:
        data = load_episodes(stores, spec)
    except RewardDataError as e:
        fail(str(e))
    run_dir = current_run_dir()
    write_config(run_dir, cfg)
    log = RunLog(run_dir)
    t0 = time.perf_counter()
    info = {"data": str(cfg.data), "rollouts": None if cfg.rollouts is None else str(cfg.rollouts)}
    try:
        with progress_bar() as bar:
            model, metrics = train_reward(run_dir, train_cfg, data, spec, log, bar, info=info)
    except (RewardDataError, FloatingPointError) as e:
        log.close()
        fail(str(e))
    n_ok = int(data.success.sum())
    write_metrics(run_dir, {
        "task": env_cfg.task, **info, "episodes": data.n_episodes, "successful_episodes": n_ok,
        "failed_episodes": data.n_episodes - n_ok, "steps": int(data.ends[-1]), **metrics,
        "wall_time_s": time.perf_counter() - t0, "history": log.history_json(),
    })
    log.close()
    p, c = metrics["progress"], metrics["classifier"]
    sp = "n/a (no ground-truth progress in the stores)" if p["spearman"] is None else f"{p['spearman']:.3f}"
    print(f"{env_cfg.task}: held-out Spearman(Phi, true progress) {sp}; classifier AUROC {c['auroc']:.3f}, "
          f"at threshold {c['threshold']:.3f}: FPR {c['fpr']:.4f}, TPR {c['tpr']:.3f} "
          f"({metrics['splits']['test']['episodes']} test episodes)")
    print(f"reward model: {run_dir / CHECKPOINT_DIR}")
    print(f"run dir: {run_dir}")


if __name__ == "__main__":
    main()
