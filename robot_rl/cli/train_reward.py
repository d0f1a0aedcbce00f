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

from omegaconf import DictConfig, OmegaConf

from robot_rl.common.cli import fail, hydra_command, progress_bar, whole
from robot_rl.cli.common import env_config, hold_run_dir, make_env, set_torch_threads
from robot_rl.common.run_dir import current_run_dir, write_config, write_metrics

# steps / batch_size: auto -> (state-only, with cameras); frames through the ResNet are the cost on CPU
AUTO = {"steps": (3000, 500), "batch_size": (512, 64)}
INSTRUCTION = ("true", "false", "auto")


def _inputs(cfg: DictConfig) -> tuple[list[str] | None, list[str], str]:
    """(state keys or None = every key, cameras, instruction setting) from cfg.inputs, or fail."""
    node = OmegaConf.to_container(cfg.inputs, resolve=True) if cfg.get("inputs") is not None else {}
    unknown = sorted(set(node) - {"state", "cameras", "instruction"})
    if unknown:
        fail(f"unknown inputs key(s) {unknown}; valid: cameras, instruction, state")
    state, cameras = node.get("state"), node.get("cameras") or []
    if state is not None and not (isinstance(state, list) and all(isinstance(k, str) and k for k in state)):
        fail(f"inputs.state={state!r} must be a list of observation keys (e.g. [proprio]), [] or null (every key)")
    if not (isinstance(cameras, list) and all(isinstance(c, str) and c for c in cameras)):
        fail(f"inputs.cameras={cameras!r} must be a list of camera names, e.g. [front,wrist]")
    if len(set(cameras)) != len(cameras):
        fail(f"inputs.cameras={cameras} names a camera twice")
    instruction = node.get("instruction", "auto")
    instruction = {True: "true", False: "false"}.get(instruction, instruction)
    if instruction not in INSTRUCTION:
        fail(f"inputs.instruction={instruction!r} must be one of {', '.join(INSTRUCTION)}")
    return state, cameras, instruction


def _image_encoder(node) -> dict:
    """cfg.image_encoder validated (whole numbers, widths divisible by groups), or fail."""
    from robot_rl.reward.model import IMAGE_ENCODER

    values = OmegaConf.to_container(node, resolve=True) if node is not None else {}
    unknown = sorted(set(values) - set(IMAGE_ENCODER))
    if unknown:
        fail(f"unknown image_encoder key(s) {unknown}; valid: {', '.join(sorted(IMAGE_ENCODER))}")
    values = {**IMAGE_ENCODER, **values}
    for k in ("groups", "grid", "token_dim", "downsample"):
        whole(f"image_encoder.{k}", values[k], 1)
    whole("image_encoder.shift", values["shift"], 0)
    ch = values["channels"]
    if not (isinstance(ch, list) and ch and all(isinstance(c, int) and not isinstance(c, bool) and c >= 1
                                                and c % values["groups"] == 0 for c in ch)):
        fail(f"image_encoder.channels={ch!r} must be a list of widths >= 1, each divisible by "
             f"image_encoder.groups={values['groups']}")
    return values


def _configs(cfg: DictConfig, images: bool):
    from robot_rl.reward.train import RewardTrainConfig

    env_cfg = env_config(cfg.env)
    if not isinstance(cfg.data, str) or not cfg.data:
        fail("data=PATH must name an episode store of demonstrations (robot-rl-collect out=PATH writes one)")
    if cfg.rollouts is not None and not (isinstance(cfg.rollouts, str) and cfg.rollouts):
        fail(f"rollouts={cfg.rollouts!r} must be an episode store path (robot-rl-collect policy=... out=PATH) or null")
    fields = {f.name for f in dataclasses.fields(RewardTrainConfig)}
    values = {k: v for k, v in OmegaConf.to_container(cfg, resolve=True).items() if k in fields}
    for k, (state_only, with_cameras) in AUTO.items():
        if values[k] == "auto":
            values[k] = with_cameras if images else state_only
    for k in ("steps", "batch_size", "log_every", "positive_frames", "failure_neighbors"):
        whole(k, values[k], 1)
    for k in ("gap_frames", "seed"):
        whole(k, values[k], 0)
    whole("torch_threads", cfg.torch_threads, 0)
    values["image_encoder"] = _image_encoder(cfg.get("image_encoder"))
    keys = values.get("failure_neighbor_keys")
    if keys not in (None, "auto") and not (isinstance(keys, list) and all(isinstance(k, str) and k for k in keys)):
        fail(f"failure_neighbor_keys={keys!r} must be auto, null (every vector key) or a list of selectors "
             "(key, key[i] or key[i:j], e.g. [object[7:11],proprio[14]])")
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


def instruction_names_goal(task) -> bool:
    """The task's instruction says which goal an episode has (it overrides Task.instruction, as color_lift does);
    single-goal tasks draw paraphrases of one goal, which a reward model need not read."""
    from sim.task import Task

    return type(task).instruction is not Task.instruction


def build_spec(task: str, obs_dims: dict[str, int], task_obj, stores, state, cameras, instruction: str):
    """The RewardSpec of the inputs the config selects, with frame sizes from the stores; fails naming the problem."""
    from robot_rl.reward.model import RewardSpec
    from robot_rl.reward.train import RewardDataError, camera_shapes

    keys = list(obs_dims) if state is None else state
    unknown = [k for k in keys if k not in obs_dims]
    if unknown:
        fail(f"inputs.state: {unknown} are not observation keys of task {task!r} (it has {sorted(obs_dims)})")
    try:
        shapes = camera_shapes(stores, cameras, task)
    except RewardDataError as e:
        fail(str(e))
    reads_text = instruction == "true" or (instruction == "auto" and instruction_names_goal(task_obj))
    if not keys and not shapes and not reads_text:
        fail("inputs.state=[], inputs.cameras=[] and no instruction: the reward model would read nothing")
    return RewardSpec(task=task, obs_dims={k: obs_dims[k] for k in keys}, image_shapes=shapes,
                      instruction=reads_text)


@hydra_command("train_reward")
def main(cfg: DictConfig) -> None:
    state, cameras, instruction = _inputs(cfg)
    env_cfg, train_cfg = _configs(cfg, images=bool(cameras))
    set_torch_threads(int(cfg.torch_threads))
    stores = [_open(cfg.data, "data")] + ([_open(cfg.rollouts, "rollouts")] if cfg.rollouts is not None else [])

    from robot_rl.reward.model import CHECKPOINT_DIR
    from robot_rl.reward.train import RewardDataError, load_episodes, rollout_policies, train_reward
    from robot_rl.common.run_log import RunLog

    env = make_env(env_cfg)  # only for the task's observation spec
    try:
        spec = build_spec(env_cfg.task, dict(env.obs_dims), env.task, stores, state, cameras, instruction)
    finally:
        env.close()
    try:
        data = load_episodes(stores, spec, train_cfg.failure_neighbor_keys)
    except RewardDataError as e:
        fail(str(e))
    if spec.instruction:  # the sentence encoder (extra `vla`) and every instruction's length, before training
        from policies.encoders import sentence_encoder

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
