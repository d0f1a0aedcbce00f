"""robot-rl-quickstart: build an env from the Hydra config and evaluate the scripted expert on it.

    robot-rl-quickstart task=push env.backend=mjx env.num_envs=8 episodes=20 randomization=sim2real

Writes runs/quickstart/<timestamp>-<name>/{config.yaml, metrics.json}.
"""

from __future__ import annotations

import time

import hydra
from omegaconf import DictConfig

from robot_rl.cli.common import env_config, fail, make_env, number, progress_bar, whole
from robot_rl.run_dir import current_run_dir, write_config, write_metrics


def _evaluate(env, expert, episodes: int, seed: int) -> dict:
    from sim.experts import run_episodes

    with progress_bar() as bar:
        task = bar.add_task(f"{env.cfg.task} expert", total=episodes)
        return run_episodes(env, expert, episodes, seed=seed, progress=lambda n: bar.advance(task, n))


@hydra.main(version_base=None, config_path="pkg://configs", config_name="quickstart")
def main(cfg: DictConfig) -> None:
    t0 = time.perf_counter()
    env_cfg = env_config(cfg.env)
    episodes = whole("episodes", cfg.episodes, 1)
    noise = number("expert_noise", cfg.expert_noise)

    run_dir = current_run_dir()
    write_config(run_dir, cfg)

    from sim.experts import make_expert

    env = make_env(env_cfg)
    try:
        try:
            expert = make_expert(env, noise=noise, seed=int(cfg.seed))
        except ValueError as e:  # no expert for this task, or an action space experts cannot drive
            fail(str(e))
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
        "expert_noise": noise,
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


if __name__ == "__main__":
    main()
