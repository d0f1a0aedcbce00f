"""robot-rl-collect: record scripted-expert episodes into an episode store, batched over envs.

    robot-rl-collect task=peg_insert episodes=200 expert.noise=0.1 out=data/peg.zarr backend=mujoco

Writes the store at `out` (appends if it exists) and runs/collect/<timestamp>-<name>/{config.yaml,
metrics.json}.
"""

from __future__ import annotations

import time
from pathlib import Path

import hydra
from omegaconf import DictConfig

from robot_rl.cli.common import env_config, fail, make_env, number, progress_bar, whole
from robot_rl.run_dir import current_run_dir, write_config, write_metrics


def _check_config(cfg: DictConfig):
    env_cfg = env_config(cfg.env)
    whole("episodes", cfg.episodes, 1)
    number("expert.noise", cfg.expert.noise)
    whole("seed", cfg.seed)
    out = cfg.out
    if out is not None and not (isinstance(out, str) and out):
        fail(f"out={out!r} must be a path (or null for <run dir>/episodes.zarr)")
    if not isinstance(cfg.fsync, bool):
        fail(f"fsync={cfg.fsync!r} must be true or false")
    return env_cfg


@hydra.main(version_base=None, config_path="pkg://configs", config_name="collect")
def main(cfg: DictConfig) -> None:
    from robot_rl.data.episode_store import EpisodeStore, check_is_store
    from robot_rl.data.errors import StoreError

    t0 = time.perf_counter()
    env_cfg = _check_config(cfg)
    run_dir = current_run_dir()
    out = Path(cfg.out) if cfg.out is not None else run_dir / "episodes.zarr"
    if out.exists() and not (out.is_dir() and not any(out.iterdir())):
        try:
            check_is_store(out)  # refuse a non-store path before any env is built
        except StoreError as e:
            fail(str(e))
    write_config(run_dir, cfg)

    from robot_rl.data.collect import collect
    from sim.experts import make_expert

    env = make_env(env_cfg)
    try:
        try:
            expert = make_expert(env, noise=float(cfg.expert.noise), seed=int(cfg.seed))
        except ValueError as e:  # no expert for this task, or an action space experts cannot drive
            fail(str(e))
        try:
            store = EpisodeStore.open(out, mode="a", fsync=cfg.fsync)
        except StoreError as e:  # not a store, corrupted, or locked by another writer
            fail(str(e))
        try:
            t_collect = time.perf_counter()
            with progress_bar() as bar:
                task = bar.add_task(f"{env_cfg.task} expert -> {out.name}", total=cfg.episodes)
                result = collect(
                    env, expert, store, cfg.episodes, seed=int(cfg.seed), source="expert",
                    metadata={"backend": env_cfg.backend, "expert_noise": float(cfg.expert.noise)},
                    progress=lambda n: bar.advance(task, n),
                )
        except StoreError as e:  # the store holds episodes of another shape (e.g. another task)
            fail(str(e))
        finally:
            store.close()
        t_end = time.perf_counter()
    finally:
        env.close()

    metrics = {
        "task": env_cfg.task,
        "backend": env_cfg.backend,
        "num_envs": env_cfg.num_envs,
        "expert_noise": float(cfg.expert.noise),
        "seed": int(cfg.seed),
        "store": str(out),
        **result,
        "wall_time_s": t_end - t0,  # config + env build (incl. any JIT compile) + collection
        "collect_time_s": t_end - t_collect,
        "steps_per_s": result["steps"] / max(t_end - t_collect, 1e-9),
    }
    write_metrics(run_dir, metrics)
    print(
        f"{env_cfg.task} / {env_cfg.backend}: recorded {result['episodes']} episodes ({result['steps']} steps), "
        f"success rate {result['success_rate']:.3f}, into {out} (now {result['store_episodes']} episodes)"
    )
    print(f"run dir: {run_dir}")


if __name__ == "__main__":
    main()
