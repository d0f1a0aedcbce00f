"""robot-rl-train-bc: train a diffusion base policy by behaviour cloning from an episode store.

    robot-rl-train-bc task=lift data=data/lift.zarr steps=3000 policy.inference_steps=10

Writes runs/train_bc/<timestamp>-<name>/ (see robot_rl/train_bc.py). Run it again with
hydra.run.dir=<that directory> to resume from its latest checkpoint.
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

import hydra
from omegaconf import DictConfig, OmegaConf

from robot_rl.cli.common import env_config, fail, make_env, progress_bar, set_torch_threads, whole
from robot_rl.run_dir import current_run_dir, write_config


def _configs(cfg: DictConfig):
    from policies.diffusion.policy import DiffusionConfig
    from robot_rl.train_bc import BCConfig

    env_cfg = env_config(cfg.env)
    pol = OmegaConf.to_container(cfg.policy, resolve=True)
    if pol.pop("kind", "diffusion") != "diffusion":
        fail(f"policy.kind={cfg.policy.kind!r}: robot-rl-train-bc trains kind 'diffusion'")
    try:
        policy_cfg = DiffusionConfig.from_dict(pol)
    except (TypeError, ValueError) as e:
        fail(str(e))
    if cfg.data is None or not isinstance(cfg.data, str):
        fail("data=PATH must name an episode store (robot-rl-collect out=PATH writes one)")
    fields = {f.name for f in dataclasses.fields(BCConfig)}
    values = {k: cfg[k] for k in fields if k in cfg}
    for k in ("steps", "batch_size", "log_every", "ckpt_every", "keep_checkpoints", "eval_episodes"):
        whole(k, values[k], 1)
    for k in ("warmup_steps", "eval_every", "videos", "seed", "eval_seed"):
        whole(k, values[k], 0)
    if values["videos"] > env_cfg.num_envs:
        fail(f"videos={values['videos']} must be <= env.num_envs={env_cfg.num_envs}")
    for k in ("lr", "grad_clip"):
        if not (isinstance(values[k], (int, float)) and values[k] > 0):
            fail(f"{k}={values[k]!r} must be a number > 0")
    whole("torch_threads", cfg.torch_threads, 0)
    return env_cfg, policy_cfg, BCConfig(**values)


def _open_store(path: str, env_cfg, obs_dims: dict):
    from robot_rl.data import EpisodeStore, StoreError

    try:
        store = EpisodeStore.open(path)
    except StoreError as e:
        fail(str(e))
    if store.n_episodes == 0:
        fail(f"episode store {path} has no episodes; record some with robot-rl-collect out={path}")
    tasks = sorted(set(store.episode_attr("task").tolist()))
    if tasks != [env_cfg.task]:
        fail(f"episode store {path} holds task(s) {tasks}, the run trains task {env_cfg.task!r}; "
             f"set task=... to match or collect data for {env_cfg.task!r}")
    missing = [k for k in [f"obs/{k}" for k in obs_dims] + ["action"] if k not in store.keys]
    if missing:
        fail(f"episode store {path} lacks key(s) the policy needs: {missing} (it has {sorted(store.keys)})")
    for k, d in obs_dims.items():
        shape = tuple(store.keys[f"obs/{k}"].shape)
        if shape != (d,):
            fail(f"episode store {path}: obs/{k} has per-step shape {shape}, task {env_cfg.task!r} observes ({d},)")
    return store


@hydra.main(version_base=None, config_path="pkg://configs", config_name="train_bc")
def main(cfg: DictConfig) -> None:
    env_cfg, policy_cfg, bc_cfg = _configs(cfg)
    set_torch_threads(int(cfg.torch_threads))
    run_dir = current_run_dir()

    from robot_rl.checkpoint import CheckpointError
    from robot_rl.run_log import RunLog
    from robot_rl.train_bc import RESUME_KEYS, BCWorkspace, ResumeMismatch, write_results

    env = make_env(env_cfg)
    try:
        store = _open_store(bc_cfg.data, env_cfg, env.obs_dims)
        resolved = OmegaConf.to_container(cfg, resolve=True)
        resolved["task"] = env_cfg.task
        resume_config = {k: resolved.get(k) for k in RESUME_KEYS}
        ws = BCWorkspace(run_dir, bc_cfg, policy_cfg, env, store, resume_config)
        try:
            resumed = ws.try_resume()
        except (ResumeMismatch, CheckpointError) as e:
            fail(str(e))
        write_config(run_dir, cfg)
        log = RunLog(run_dir, resume_step=ws.step if resumed else None)
        resumed_from = ws.step if resumed else None
        if resumed:
            print(f"resuming {run_dir} from step {ws.step}")
        t0 = time.perf_counter()
        try:
            with progress_bar() as bar:
                result = ws.run(log, bar)
        except FloatingPointError as e:
            fail(str(e))
        write_results(run_dir, log, result, {
            "task": env_cfg.task, "data": str(Path(bc_cfg.data)), "episodes": store.n_episodes,
            "windows": len(ws.sampler), "resumed_from": resumed_from, "wall_time_s": time.perf_counter() - t0,
        })
        log.close()
        store.close()
    finally:
        env.close()
    final = result["final_eval"]
    lo, hi = final["success_ci95"]
    print(f"{env_cfg.task}: BC success {final['success_rate']:.3f} (95% CI {lo:.2f}-{hi:.2f}) over "
          f"{final['episodes']} episodes after {result['steps']} steps ({result['train_time_s']:.0f} s)")
    print(f"policy: {run_dir / 'policy'}")
    print(f"run dir: {run_dir}")


if __name__ == "__main__":
    main()
