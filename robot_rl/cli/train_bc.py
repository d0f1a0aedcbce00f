"""robot-rl-train-bc: train a base policy (diffusion or VLA) by behaviour cloning from episode stores.

    robot-rl-train-bc task=lift data=data/lift.zarr steps=3000 policy.inference_steps=10
    robot-rl-train-bc policy=vla task=color_lift data=data/color_lift.zarr env.cameras=[front,wrist]

Writes runs/train_bc/<timestamp>-<name>/ (see robot_rl/train_bc.py). Run it again with
hydra.run.dir=<that directory> to resume from its latest checkpoint.
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from robot_rl.common.config import from_mapping
from robot_rl.common.cli import fail, hydra_command, progress_bar, whole
from robot_rl.cli.common import apply_recommended, env_config, hold_run_dir, make_env, resume_or_fail, set_torch_threads
from robot_rl.common.run_dir import current_run_dir, write_config


# policy kind -> its config class ("module:Class"); the kind's policy class is in policies.REGISTRY
BC_KINDS = {"diffusion": "robot_rl.policies.diffusion.policy:DiffusionConfig", "vla": "robot_rl.policies.vla.policy:VLAConfig"}


def policy_config(node):
    """Validated policy config (DiffusionConfig, VLAConfig) from a `policy` node, chosen by its `kind`."""
    import importlib

    pol = OmegaConf.to_container(node, resolve=True)
    kind = pol.pop("kind", "diffusion")
    if kind not in BC_KINDS:
        fail(f"policy.kind={kind!r}: BC trains kind(s) {', '.join(sorted(BC_KINDS))} (policy=diffusion | policy=vla)")
    module, name = BC_KINDS[kind].split(":")
    try:
        return from_mapping(getattr(importlib.import_module(module), name), pol, "policy")
    except (TypeError, ValueError) as e:
        fail(str(e))


def bc_config(node, env_cfg, data, where: str = ""):
    """Validated BCConfig from a node holding its fields (`where` prefixes key names in errors): types by
    from_mapping, ranges by BCConfig itself; `videos` against the env here."""
    from robot_rl.common.config import ConfigError
    from robot_rl.train_bc import BCConfig

    fields = {f.name for f in dataclasses.fields(BCConfig)} - {"data"}
    values = {k: node[k] for k in fields if k in node}
    try:
        bc = from_mapping(BCConfig, {**values, "data": data}, where.rstrip("."))
    except ConfigError as e:
        fail(str(e))
    except ValueError as e:  # BCConfig.__post_init__: its message starts with the key
        fail(where + str(e))
    if bc.videos > env_cfg.num_envs:
        fail(f"{where}videos={bc.videos} must be <= env.num_envs={env_cfg.num_envs}")
    return bc


def _configs(cfg: DictConfig):
    env_cfg = env_config(cfg.env)
    policy_cfg = policy_config(cfg.policy)
    bc_cfg = bc_config(cfg, env_cfg, cfg.data)
    whole("torch_threads", cfg.torch_threads, 0)
    return env_cfg, policy_cfg, bc_cfg


def open_store(path: str, env_cfg, obs_dims: dict, cameras=(), instruction: bool = False, skip_damaged: bool = False):
    """The episode store at `path`, checked to hold `env_cfg.task_name`'s episodes with the keys the policy reads
    (vector observations, the frames of `cameras`, a non-empty instruction per episode when asked); its damaged
    episodes are refused, or left out with skip_damaged."""
    from robot_rl.data import EpisodeStore, StoreError

    try:
        store = EpisodeStore.open(path, skip_damaged=skip_damaged)
    except StoreError as e:
        fail(str(e))
    good = store.good_episodes
    if store.n_episodes == 0:
        fail(f"episode store {path} has no episodes; record some with robot-rl-collect out={path}")
    if len(good) == 0:
        fail(f"episode store {path}: all {store.n_episodes} episodes are damaged (robot-rl-data verify {path})")
    tasks = sorted(set(store.episode_attr("task")[good].tolist()))
    if tasks != [env_cfg.task_name]:
        fail(f"episode store {path} holds task(s) {tasks}, the run trains task {env_cfg.task_name!r}; "
             f"set env.task=... to match or collect data for {env_cfg.task_name!r}")
    missing = [k for k in [f"obs/{k}" for k in obs_dims] + ["action"] if k not in store.keys]
    if missing:
        fail(f"episode store {path} lacks key(s) the policy needs: {missing} (it has {sorted(store.keys)})")
    for k, d in obs_dims.items():
        shape = tuple(store.keys[f"obs/{k}"].shape)
        if shape != (d,):
            fail(f"episode store {path}: obs/{k} has per-step shape {shape}, task {env_cfg.task_name!r} observes ({d},)")
    want = [f"obs/images/{c}" for c in cameras]
    lacking = [k for k in want if k not in store.keys]
    if lacking:
        have = sorted(k[len("obs/images/"):] for k in store.keys if k.startswith("obs/images/"))
        fail(f"episode store {path} lacks {', '.join(lacking)} (it has cameras {have}); the policy reads cameras "
             f"{list(cameras)}: record them with robot-rl-collect env.task={env_cfg.task_name} out=PATH "
             f"env.cameras=[{','.join(cameras)}], or set policy.cameras=[...] to the store's cameras")
    for k in want:
        spec = store.keys[k]
        if len(spec.shape) != 3 or spec.shape[2] != 3 or spec.dtype != "uint8":
            fail(f"episode store {path}: {k} is {spec.dtype} {tuple(spec.shape)} per step, expected uint8 (H, W, 3)")
    if instruction:
        text = [str(x) for x in store.episode_attr("instruction")[good]]
        empty = sum(1 for t in text if not t.strip())
        if empty:
            fail(f"episode store {path}: {empty} of {len(text)} episode(s) have an empty instruction; the policy reads "
                 "one (policy.instruction=true): record a task with instructions, or set policy.instruction=false")
    return store


def check_same_images(stores, paths, cameras) -> None:
    """Every store holds the cameras at one frame size (the policy has one input size per camera)."""
    for c in cameras:
        k = f"obs/images/{c}"
        sizes = {p: tuple(s.keys[k].shape) for s, p in zip(stores, paths)}
        if len(set(sizes.values())) > 1:
            fail(f"the stores hold {k} at different sizes {sizes}; record them at one size (env.image_size)")


@hydra_command("train_bc")
def main(cfg: DictConfig) -> None:
    apply_recommended(cfg, "train_bc")  # the task's own settings (sim Task.recommended)
    env_cfg, policy_cfg, bc_cfg = _configs(cfg)
    set_torch_threads(int(cfg.torch_threads))
    run_dir = current_run_dir()

    from robot_rl.policies import SpecMismatch
    from robot_rl.common.checkpoint import CheckpointError
    from robot_rl.common.run_log import RunLog
    from robot_rl.data.errors import StoreError
    from robot_rl.train_bc import BCWorkspace, write_results

    env = make_env(env_cfg)
    try:
        cameras = tuple(getattr(policy_cfg, "cameras", ()))
        stores = [open_store(p, env_cfg, env.obs_dims, cameras, getattr(policy_cfg, "instruction", False),
                             bc_cfg.skip_damaged) for p in bc_cfg.paths]
        check_same_images(stores, bc_cfg.paths, cameras)
        try:
            ws = BCWorkspace(run_dir, bc_cfg, policy_cfg, env, stores)
        except (CheckpointError, SpecMismatch, ValueError, ImportError, StoreError) as e:
            fail(str(e))  # init checkpoint, weightless store, a policy the eval env cannot feed, missing extra, a
            # chunk damaged since the store was opened
        with hold_run_dir(run_dir):  # one training per run dir; the resume check first, then any write
            resumed = resume_or_fail(ws)
            write_config(run_dir, cfg)
            log = RunLog(run_dir, resume_step=ws.step if resumed else None)
            resumed_from = ws.step if resumed else None
            if resumed:
                print(f"resuming {run_dir} from step {ws.step}")
            t0 = time.perf_counter()
            try:
                with progress_bar() as bar:
                    result = ws.run(log, bar)
            except (FloatingPointError, StoreError) as e:  # StoreError: a chunk a lazy batch reads is damaged
                fail(str(e))
            write_results(run_dir, log, result, {
                "task": env_cfg.task_name, "data": str(Path(bc_cfg.data)) if isinstance(bc_cfg.data, str) else bc_cfg.data,
                "episodes": sum(len(s.good_episodes) for s in stores), "windows": len(ws.sampler), "resumed_from": resumed_from,
                "wall_time_s": time.perf_counter() - t0, "init": bc_cfg.init, "mixture": ws.mixture,
            })
            log.close()
        for s in stores:
            s.close()
    finally:
        env.close()
    final = result["final_eval"]
    done = f"{env_cfg.task_name}: trained {result['steps']} steps ({result['train_time_s']:.0f} s)"
    if final is not None:
        lo, hi = final["success_ci95"]
        done += (f"; BC success {final['success_rate']:.3f} (95% CI {lo:.2f}-{hi:.2f}) over "
                 f"{final['episodes']} episodes")
    print(done)
    print(f"policy: {run_dir / 'policy'}")
    print(f"run dir: {run_dir}")


if __name__ == "__main__":
    main()
