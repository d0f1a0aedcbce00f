"""robot-rl-eval: evaluate any BasePolicy checkpoint, or the scripted expert, on a batched sim env.

    robot-rl-eval policy=runs/train_bc/<run>/policy task=lift episodes=200 env.num_envs=25
    robot-rl-eval policy=expert task=push episodes=100

Writes runs/eval/<timestamp>-<name>/{config.yaml, metrics.json, videos/episode_<i>.mp4}: success rate with
its 95% Wilson interval, mean return and length, the seed and the (env, episode) ids of every episode.
With sweep=robustness it writes the robustness report card of one policy or several instead
(robot_rl/cli/robustness.py): robot-rl-eval sweep=robustness policy=[expert,runs/train_bc/<run>/policy]
"""

from __future__ import annotations

import time

from omegaconf import DictConfig, ListConfig, OmegaConf

from robot_rl.common.cli import fail, hydra_command, number, progress_bar, whole
from robot_rl.cli.common import env_config, load_checkpoint, make_env, set_torch_threads
from robot_rl.common.run_dir import current_run_dir, write_config, write_metrics


def load(policy: str, env, cfg: DictConfig):
    """The policy to evaluate: a checkpoint directory or "expert"."""
    if policy == "expert":
        from robot_rl.policies.expert import ExpertPolicy

        try:
            return ExpertPolicy(env, noise=number("expert_noise", cfg.expert_noise), seed=int(cfg.seed),
                                path=cfg.get("expert_path"))
        except ValueError as e:
            fail(str(e))
    return load_checkpoint(policy, env, str(cfg.device))


@hydra_command("eval")
def main(cfg: DictConfig) -> None:
    if cfg.get("sweep") is not None:
        from robot_rl.cli.robustness import run

        return run(cfg)
    env_cfg = env_config(cfg.env)
    episodes = whole("episodes", cfg.episodes, 1)
    seed = whole("seed", cfg.seed, 0)
    videos = whole("videos", cfg.videos, 0)
    if videos > env_cfg.num_envs:
        fail(f"videos={videos} must be <= env.num_envs={env_cfg.num_envs}")
    if isinstance(cfg.policy, (ListConfig, DictConfig)):
        fail(f"policy={OmegaConf.to_container(cfg.policy)} names several policies: comparing policies is what "
             "the robustness card does (add sweep=robustness), or give one policy")
    if not isinstance(cfg.policy, str) or not cfg.policy:
        fail("policy=PATH (a checkpoint directory) or policy=expert is required")
    set_torch_threads(whole("torch_threads", cfg.torch_threads, 0))
    run_dir = current_run_dir()

    from robot_rl.evaluation import evaluate_policy

    t0 = time.perf_counter()
    env = make_env(env_cfg)
    try:
        policy = load(cfg.policy, env, cfg)
        write_config(run_dir, cfg)  # the policy loaded: the run is on
        try:
            with progress_bar() as bar:
                task = bar.add_task(f"eval {env_cfg.task_name}", total=episodes)
                metrics = evaluate_policy(
                    env, policy, episodes, seed=seed, videos=videos, video_dir=run_dir / "videos",
                    camera=str(cfg.camera), size=tuple(cfg.video_size), progress=lambda n: bar.advance(task, n),
                )
        except ValueError as e:  # e.g. an unknown camera
            fail(str(e))
    finally:
        env.close()
    metrics.update(policy=str(cfg.policy), wall_time_s=time.perf_counter() - t0)
    write_metrics(run_dir, metrics)
    lo, hi = metrics["success_ci95"]
    print(f"{env_cfg.task_name} / {env_cfg.backend}: success {metrics['success_rate']:.3f} (95% CI {lo:.2f}-{hi:.2f}) "
          f"over {metrics['episodes']} episodes, mean return {metrics['mean_return']:.2f}, "
          f"mean length {metrics['mean_length']:.1f}")
    for goal, m in metrics.get("by_goal", {}).items():
        g_lo, g_hi = m["success_ci95"]
        print(f"  {goal}: success {m['success_rate']:.3f} (95% CI {g_lo:.2f}-{g_hi:.2f}) over {m['episodes']} episodes")
    print(f"run dir: {run_dir}")


if __name__ == "__main__":
    main()
