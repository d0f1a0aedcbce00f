"""Batched policy evaluation: success rate with a Wilson interval, returns, lengths, seeds, and videos.

Used by `robot-rl-eval`, by periodic evaluation during training and by the quickstart, so every number
that says "success rate" is computed the same way.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np


def wilson_interval(successes: int, n: int) -> tuple[float, float]:
    """95% Wilson score interval of a binomial proportion (scipy's); (0, 1) when there are no trials."""
    if n <= 0:  # binomtest refuses n = 0; callers print (0, 1): nothing is known
        return 0.0, 1.0
    from scipy.stats import binomtest  # ~1 s to import: only when an interval is computed

    ci = binomtest(int(successes), int(n)).proportion_ci(confidence_level=0.95, method="wilson")
    return float(ci.low), float(ci.high)


def evaluate_policy(env, policy, episodes: int, seed: int = 0, videos: int = 0, video_dir: str | Path | None = None,
                    camera: str = "overview", size: tuple[int, int] = (320, 240), progress=None) -> dict:
    """Run `policy` (a BasePolicy) for `episodes` episodes on a batched env; videos of the first episodes
    of envs 0..videos-1 go to video_dir/episode_<env>.mp4."""
    from robot_rl.policies.runner import PolicyRunner
    from robot_rl.sim.experts import run_episodes

    policy.spec.check_env(env)
    if videos > env.num_envs:
        raise ValueError(f"videos={videos} must be <= num_envs={env.num_envs} (one first episode per env)")
    if videos and video_dir is None:
        raise ValueError("videos > 0 needs a video_dir")
    runner = PolicyRunner(policy, env.num_envs, env=env)  # reads env.instruction for policies that need it
    frames: list[list[np.ndarray]] = [[] for _ in range(videos)]
    recording = np.arange(videos)

    def on_step(obs, done):
        nonlocal recording
        # The frame after an episode's last step already shows the next episode (auto-reset): stop there.
        recording = recording[~done[recording]]
        if len(recording):
            for i, f in zip(recording, env.render(recording, camera, *size)):
                frames[i].append(f)

    result = run_episodes(env, runner, episodes, seed=seed, progress=progress, on_step=on_step if videos else None)
    k = sum(result["successes"])
    lo, hi = wilson_interval(k, result["episodes"])
    metrics = {
        "episodes": result["episodes"],
        "successes": k,
        "success_rate": result["success_rate"],
        "success_ci95": [lo, hi],
        "mean_return": result["mean_return"],
        "mean_length": result["mean_length"],
        "seed": seed,
        "episode_ids": result["episode_ids"],
        # outcome of each episode, in episode_ids' order: pairs the same scenes across runs (e.g. the instruction swap)
        "episode_success": [bool(s) for s in result["successes"]],
        "task": env.task_name,
        "backend": env.backend,
        "num_envs": env.num_envs,
    }
    by_goal = {}
    for g in sorted({g for g in result["goals"] if g is not None}):
        won = [s for s, h in zip(result["successes"], result["goals"]) if h == g]
        lo_g, hi_g = wilson_interval(sum(won), len(won))
        by_goal[g] = {"episodes": len(won), "successes": sum(won), "success_rate": sum(won) / len(won),
                      "success_ci95": [lo_g, hi_g]}
    if by_goal:  # multi-goal tasks (the instruction picks the goal): success per goal
        metrics["by_goal"] = by_goal
    if videos:
        from robot_rl.video import write_mp4

        metrics["videos"] = [
            str(write_mp4(Path(video_dir) / f"episode_{i}.mp4", np.stack(f), fps=env.control_hz))
            for i, f in enumerate(frames) if f
        ]
    return metrics
