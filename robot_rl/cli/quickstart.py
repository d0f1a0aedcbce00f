"""robot-rl-quickstart: build an env from the Hydra config and evaluate the scripted expert on it.

    robot-rl-quickstart task=push env.backend=mjx env.num_envs=8 episodes=20 randomization=sim2real

Writes runs/quickstart/<timestamp>-<name>/{config.yaml, metrics.json}.
"""

from __future__ import annotations

import logging
import sys
import time

import hydra
from omegaconf import DictConfig

from robot_rl.run_dir import current_run_dir, write_config, write_metrics


def _fail(msg: str) -> None:
    """A wrong config value: one clear message on stderr, exit code 2, no traceback."""
    print(f"robot-rl-quickstart: config error: {msg}", file=sys.stderr)
    sys.exit(2)


def _evaluate(env, expert, episodes: int, seed: int) -> dict:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

    from sim.experts import run_episodes

    columns = (
        TextColumn("[progress.description]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("elapsed"),
        TimeElapsedColumn(),
        TextColumn("eta"),
        TimeRemainingColumn(),
    )
    with Progress(*columns, transient=False) as bar:
        task = bar.add_task(f"{env.cfg.task} expert", total=episodes)
        return run_episodes(env, expert, episodes, seed=seed, progress=lambda n: bar.advance(task, n))


@hydra.main(version_base=None, config_path="pkg://configs", config_name="quickstart")
def main(cfg: DictConfig) -> None:
    from sim.config import ConfigError, from_mapping

    t0 = time.perf_counter()
    try:
        env_cfg = from_mapping(cfg.env)
        env_cfg.validate(_task_names())
    except (ValueError, TypeError) as e:  # ConfigError, or a value of the wrong type (num_envs=abc)
        _fail(str(e))
    episodes, noise = cfg.episodes, cfg.expert_noise
    if not (isinstance(episodes, int) and episodes >= 1):
        _fail(f"episodes={episodes!r} must be a whole number >= 1")
    if not (isinstance(noise, (int, float)) and noise >= 0):
        _fail(f"expert_noise={noise!r} must be a number >= 0")

    run_dir = current_run_dir()
    write_config(run_dir, cfg)

    if env_cfg.backend == "mjx":
        from robot_rl.jax_cache import enable_compilation_cache

        # Hydra logs at INFO; JAX's backend probing (no TPU, ...) is noise for this command.
        logging.getLogger("jax").setLevel(logging.WARNING)
        enable_compilation_cache()

    import sim
    from sim.experts import make_expert

    try:
        env = sim.make_from_config(env_cfg)
    except ConfigError as e:  # task_config is checked against the task's own config class here
        _fail(str(e))
    try:
        try:
            expert = make_expert(env, noise=float(noise), seed=int(cfg.seed))
        except ValueError as e:  # no expert for this task, or an action space experts cannot drive
            _fail(str(e))
        t_eval = time.perf_counter()
        result = _evaluate(env, expert, episodes, int(cfg.seed))
        t_end = time.perf_counter()
    finally:
        env.close()

    metrics = {
        "task": env_cfg.task,
        "backend": env_cfg.backend,
        "num_envs": env_cfg.num_envs,
        "episodes": result["episodes"],
        "success_rate": result["success_rate"],
        "mean_return": result["mean_return"],
        "mean_length": result["mean_length"],
        "expert_noise": float(noise),
        "seed": int(cfg.seed),
        "wall_time_s": t_end - t0,  # config + env build (incl. any JIT compile) + evaluation
        "eval_time_s": t_end - t_eval,
    }
    write_metrics(run_dir, metrics)
    print(
        f"{env_cfg.task} / {env_cfg.backend}: expert success rate {result['success_rate']:.3f} "
        f"over {result['episodes']} episodes (mean return {result['mean_return']:.2f}, "
        f"mean length {result['mean_length']:.1f} steps)"
    )
    print(f"run dir: {run_dir}")


def _task_names():
    from sim.tasks import TASKS

    return TASKS


if __name__ == "__main__":
    main()
