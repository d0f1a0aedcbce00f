"""robot-rl-train-reward: train the progress model and success classifier of a task from episode stores.

    robot-rl-train-reward task=lift data=runs/results/lift-demos.zarr rollouts=runs/results/lift-rollouts.zarr
    robot-rl-train-reward task=color_lift data=... rollouts=... inputs.cameras=[front,wrist] inputs.state=[proprio]

inputs.* choose what both networks read: vector keys, camera frames (from the stores' obs/images/<camera>), the
episode's instruction (true | false | auto: on for tasks whose instruction names the episode's goal).
Writes runs/train_reward/<timestamp>-<name>/ with reward_model/ (what residual RL's reward_model= loads),
config.yaml, metrics.json (held-out Spearman of Phi with ground-truth progress, classifier AUROC, rates at
the calibrated threshold), TensorBoard events, curves.png and progress.png (see robot_rl/reward/train.py).
"""

from __future__ import annotations

import dataclasses
import time

from omegaconf import DictConfig

from robot_rl.common.cli import fail, hydra_command, or_fail, progress_bar, whole
from robot_rl.common.config import from_mapping
from robot_rl.cli.common import env_config, hold_run_dir, make_env, set_torch_threads
from robot_rl.common.run_dir import current_run_dir, write_config, write_metrics

def _configs(cfg: DictConfig):
    """(env config, RewardTrainConfig with steps / batch_size resolved) from the command line, or fail."""
    from robot_rl.reward.train import RewardTrainConfig

    env_cfg = env_config(cfg.env)
    if not isinstance(cfg.data, str) or not cfg.data:
        fail("data=PATH must name an episode store of demonstrations (robot-rl-collect out=PATH writes one)")
    if cfg.rollouts is not None and not (isinstance(cfg.rollouts, str) and cfg.rollouts):
        fail(f"rollouts={cfg.rollouts!r} must be an episode store path (robot-rl-collect policy=... out=PATH) or null")
    whole("torch_threads", cfg.torch_threads, 0)
    fields = {f.name for f in dataclasses.fields(RewardTrainConfig)}
    train_cfg = or_fail(from_mapping, RewardTrainConfig, {k: v for k, v in cfg.items() if k in fields})
    return env_cfg, train_cfg.resolved(images=bool(train_cfg.inputs.cameras))


def _open(path: str, what: str):
    from robot_rl.data import EpisodeStore, StoreError

    try:
        return EpisodeStore.open(path)
    except StoreError as e:
        fail(f"{what}={path}: {e}")


def build_spec(task: str, obs_dims: dict[str, int], names_goal: bool, stores, state, cameras, instruction: str):
    """The RewardSpec of the inputs the config selects, with frame sizes from the stores; fails naming the problem."""
    from robot_rl.reward.model import RewardSpec
    from robot_rl.reward.episodes import RewardDataError, camera_shapes

    keys = list(obs_dims) if state is None else state
    unknown = [k for k in keys if k not in obs_dims]
    if unknown:
        fail(f"inputs.state: {unknown} are not observation keys of task {task!r} (it has {sorted(obs_dims)})")
    try:
        shapes = camera_shapes(stores, cameras, task)
    except RewardDataError as e:
        fail(str(e))
    reads_text = instruction == "true" or (instruction == "auto" and names_goal)
    if not keys and not shapes and not reads_text:
        fail("inputs.state=[], inputs.cameras=[] and no instruction: the reward model would read nothing")
    return RewardSpec(task=task, obs_dims={k: obs_dims[k] for k in keys}, image_shapes=shapes,
                      instruction=reads_text)


@hydra_command("train_reward")
def main(cfg: DictConfig) -> None:
    env_cfg, train_cfg = _configs(cfg)
    state, cameras, instruction = train_cfg.inputs.state, list(train_cfg.inputs.cameras), train_cfg.inputs.instruction
    set_torch_threads(int(cfg.torch_threads))
    stores = [_open(cfg.data, "data")] + ([_open(cfg.rollouts, "rollouts")] if cfg.rollouts is not None else [])

    from robot_rl.reward.model import CHECKPOINT_DIR
    from robot_rl.reward.episodes import RewardDataError, load_episodes, rollout_policies
    from robot_rl.reward.train import train_reward
    from robot_rl.common.run_log import RunLog

    env = make_env(env_cfg)  # only for the task's observation spec
    try:
        spec = build_spec(env.task_name, dict(env.obs_dims), env.instruction_names_goal, stores, state, cameras,
                          instruction)
    finally:
        env.close()
    try:
        data = load_episodes(stores, spec, train_cfg.failure_neighbor_keys)
    except RewardDataError as e:
        fail(str(e))
    if spec.instruction:  # the sentence encoder (extra `vla`) and every instruction's length, before training
        from robot_rl.policies.encoders import sentence_encoder

        try:
            sentence_encoder().encode(list(dict.fromkeys(data.instruction)))
        except (ImportError, ValueError) as e:
            fail(f"inputs.instruction: {e}")
    run_dir = current_run_dir()
    with hold_run_dir(run_dir):  # one training per run dir
        write_config(run_dir, cfg)
        log = RunLog(run_dir)
        t0 = time.perf_counter()
        info = {"data": str(cfg.data), "rollouts": None if cfg.rollouts is None else str(cfg.rollouts),
                "steps_per_network": train_cfg.steps, "batch_size": train_cfg.batch_size,
                "rollout_policies": rollout_policies(stores)}  # whose failures it saw (residual RL checks its base)
        try:
            with progress_bar() as bar:
                model, metrics = train_reward(run_dir, train_cfg, data, spec, log, bar, info=info)
        except (RewardDataError, FloatingPointError) as e:
            log.close()
            fail(str(e))
        n_ok = int(data.success.sum())
        write_metrics(run_dir, {
            "task": env_cfg.task_name, **info, "episodes": data.n_episodes, "successful_episodes": n_ok,
            "failed_episodes": data.n_episodes - n_ok, "steps": int(data.ends[-1]), **metrics,
            "wall_time_s": time.perf_counter() - t0, "history": log.history_json(),
        })
        log.close()
    p, c = metrics["progress"], metrics["classifier"]
    sp = "n/a (no ground-truth progress in the stores)" if p["spearman"] is None else f"{p['spearman']:.3f}"
    print(f"{env_cfg.task_name}: held-out Spearman(Phi, true progress) {sp}; classifier AUROC {c['auroc']:.3f}, "
          f"at threshold {c['threshold']:.3f}: FPR {c['fpr']:.4f}, TPR {c['tpr']:.3f} "
          f"({metrics['splits']['test']['episodes']} test episodes)")
    print(f"reward model: {run_dir / CHECKPOINT_DIR}")
    print(f"run dir: {run_dir}")


if __name__ == "__main__":
    main()
