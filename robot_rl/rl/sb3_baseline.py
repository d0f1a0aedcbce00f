"""RL without demonstrations as most people would run it: stable-baselines3 SAC on the gymnasium adapter.

    python -m robot_rl.rl.sb3_baseline task=lift env_steps=200000 time_budget_s=1800 eval_every=20000 \
        out=runs/sac/lift-0 [seed=0] [reward=env] [env.task_config.episode_steps=100] [learning_starts=5000]

Trains SB3's SAC (MultiInputPolicy on the env's vector observations, one env: sim/gym_adapter.py RobotRLEnv) and
evaluates it every `eval_every` env steps through robot_rl.evaluation.evaluate_policy on a batched env of
`eval_num_envs` envs at `eval_seed`: the same episodes a residual run with the same settings is evaluated on, so
its success rate means the same thing. Arguments are key=value (dotted keys for `env`), checked against
SB3BaselineConfig; a bad one is one line and exit code 2.

The run directory `out` has the format of a residual run (robot_rl/rl/train.py), so robot_rl.rl.compare and
robot-rl-benchmark read both alike: metrics.json (history["eval/success_rate"] and ["eval/train_time_s"] as
[[env_steps, value], ...], success_rate, success_ci95, env_steps, train_time_s), tb/, curves.png, config.yaml and
SB3's model file sac_model.zip. No resume: an interrupted run is started again.
"""

from __future__ import annotations

import dataclasses
import sys
import time
from pathlib import Path

import numpy as np

from robot_rl.common.cli import fail, progress_bar
from robot_rl.common.atomic import vacant

REWARDS = ("env", "success")
INSTALL = "pip install 'robot_rl[bench]'"


@dataclasses.dataclass
class SB3BaselineConfig:
    """Everything an SB3 SAC baseline run reads (key=value on the command line)."""

    out: str  # run directory (must not hold a run yet)
    task: str = "lift"
    env: dict = dataclasses.field(default_factory=dict)  # EnvConfig overrides of both envs (task_config, ...);
    # not num_envs (training runs one env, evaluation eval_num_envs) and not cameras (SAC reads the vector observations)
    reward: str = "env"  # env: the task's dense reward | success: 1.0 on success steps (sparse)
    env_steps: int = 200_000  # training budget in env transitions
    time_budget_s: float = 1800.0  # and in training wall time, evaluations excluded (0: no limit)
    eval_every: int = 20_000  # env steps between evaluations (0: only the final one)
    eval_episodes: int = 100  # episodes per periodic evaluation
    final_eval_episodes: int = 200  # episodes of the final evaluation
    eval_seed: int = 1000
    eval_num_envs: int = 16  # envs of the evaluation env: with eval_seed, they fix which episodes are evaluated
    seed: int = 0
    log_every: int = 2_000  # env steps between TensorBoard points
    # SAC (stable_baselines3.SAC's arguments of the same names; its defaults, but replay and start as the residual's)
    learning_rate: float = 3e-4
    buffer_size: int = 300_000
    learning_starts: int = 5_000
    batch_size: int = 256
    gamma: float = 0.99
    tau: float = 0.005
    train_freq: int = 1
    gradient_steps: int = 1
    net_arch: list[int] = dataclasses.field(default_factory=lambda: [256, 256])
    torch_threads: int = 1  # intra-op threads; small nets on few cores are fastest on 1

    def __post_init__(self):
        if not self.out:
            raise ValueError("out=PATH must name the run directory to write")
        from robot_rl.common.config import check_whole
        from robot_rl.rl.train import check_budget

        check_whole(self, {"env_steps": 1, "eval_every": 0, "eval_episodes": 1, "final_eval_episodes": 1,
                           "eval_seed": 0, "eval_num_envs": 1, "seed": 0, "log_every": 1, "buffer_size": 1,
                           "learning_starts": 0, "batch_size": 1, "train_freq": 1, "gradient_steps": 1,
                           "torch_threads": 0})
        check_budget(self.env_steps, self.learning_starts, first_update=self.learning_starts + 1)  # SB3 trains
        # once num_timesteps > learning_starts
        for name in ("learning_rate", "gamma", "tau"):
            if not 0 < getattr(self, name) <= (1 if name != "learning_rate" else np.inf):
                raise ValueError(f"{name}={getattr(self, name)!r} must be a number > 0" +
                                 (" and <= 1" if name != "learning_rate" else ""))
        if not self.time_budget_s >= 0:
            raise ValueError(f"time_budget_s={self.time_budget_s!r} must be >= 0 (0: no limit)")
        if self.reward not in REWARDS:
            raise ValueError(f"reward={self.reward!r}; valid: {', '.join(REWARDS)}")
        if not self.net_arch or min(self.net_arch) < 1:
            raise ValueError(f"net_arch={self.net_arch!r} must list layer widths >= 1")
        for key in ("num_envs", "cameras", "task"):
            if key in self.env:
                raise ValueError(f"env.{key} is not an env override of this command"
                                 + (": give task=..." if key == "task" else ""))


def parse_args(argv: list[str]) -> SB3BaselineConfig:
    """key=value arguments (dotted keys nest: env.task_config.episode_steps=10) as a checked config."""
    from omegaconf import OmegaConf

    from robot_rl.common.config import from_mapping

    bad = [a for a in argv if "=" not in a or a.startswith("=")]
    if bad:
        raise ValueError(f"{bad[0]!r}: give arguments as key=value (e.g. task=lift env_steps=100000 out=runs/sac)")
    node = OmegaConf.to_container(OmegaConf.from_dotlist(argv), resolve=True)
    return from_mapping(SB3BaselineConfig, node)


def sb3_sac():
    """stable_baselines3.SAC, or ImportError naming the extra that installs it."""
    try:
        from stable_baselines3 import SAC
    except ImportError:
        raise ImportError(f"stable-baselines3 is not installed; the SB3 SAC baseline needs it: {INSTALL}") from None
    return SAC


def train(cfg: SB3BaselineConfig, log, bar=None) -> dict:
    """Train SAC under cfg's budgets with periodic evaluations into `log` (a RunLog); the run's summary."""
    import torch
    from stable_baselines3.common.callbacks import BaseCallback

    from robot_rl import sim
    from robot_rl.policies.sb3 import SB3Policy
    from robot_rl.evaluation import evaluate_policy
    from robot_rl.common.clock import TrainingClock  # training time without evaluations, as every trainer
    from robot_rl.sim.gym_adapter import RobotRLEnv

    SAC = sb3_sac()
    if cfg.torch_threads:
        torch.set_num_threads(cfg.torch_threads)
    out = Path(cfg.out)
    base = sim.make(cfg.task, num_envs=1, **cfg.env)
    eval_env = sim.make(cfg.task, num_envs=cfg.eval_num_envs, **cfg.env)
    env = RobotRLEnv(base)
    if cfg.reward == "success":
        env = _SuccessReward(env)
    model = SAC("MultiInputPolicy", env, learning_rate=cfg.learning_rate, buffer_size=cfg.buffer_size,
                learning_starts=cfg.learning_starts, batch_size=cfg.batch_size, gamma=cfg.gamma, tau=cfg.tau,
                train_freq=cfg.train_freq, gradient_steps=cfg.gradient_steps, policy_kwargs={"net_arch": cfg.net_arch},
                seed=cfg.seed, device="cpu", verbose=0)
    policy = SB3Policy(model, eval_env)
    clock = TrainingClock()
    budget = cfg.time_budget_s if cfg.time_budget_s > 0 else None
    bar_task = None
    if bar is not None:
        bar_task = bar.add_task(f"SB3 SAC {cfg.task}" + (" (training s)" if budget else " (env steps)"),
                                total=budget or cfg.env_steps)
    state = {"episodes": 0, "window": [], "t": 0.0, "steps": 0, "ever": False}

    def evaluate(episodes: int) -> dict:
        with clock.paused():
            return evaluate_policy(eval_env, policy, episodes, seed=cfg.eval_seed)

    class Hooks(BaseCallback):
        def _on_step(self) -> bool:
            step = self.num_timesteps
            info, done = self.locals["infos"][0], bool(self.locals["dones"][0])
            state["ever"] = state["ever"] or bool(info.get("success", False))
            if done:
                state["episodes"] += 1
                state["window"].append((state["ever"], float(info.get("episode_return", np.nan))))
                state["ever"] = False
            if step % cfg.log_every == 0:
                now = clock.now()
                values = {"perf/env_steps_per_s": (step - state["steps"]) / max(now - state["t"], 1e-9)}
                if state["window"]:
                    succ, ret = zip(*state["window"])
                    values.update({"rollout/success_rate": float(np.mean(succ)),
                                   "rollout/env_return": float(np.mean(ret)), "rollout/episodes": len(succ)})
                for k in ("train/actor_loss", "train/critic_loss", "train/ent_coef"):
                    if k in self.model.logger.name_to_value:
                        values[k] = float(self.model.logger.name_to_value[k])
                log.scalars(values, step)
                state.update(window=[], t=now, steps=step)
            if cfg.eval_every and step % cfg.eval_every == 0 and step < cfg.env_steps:
                m = evaluate(cfg.eval_episodes)
                log.evaluation(m, step, clock.now())
            if bar_task is not None:
                bar.update(bar_task, completed=clock.now() if budget else step)
            return not (budget and clock.now() >= budget)

    try:
        model.learn(total_timesteps=cfg.env_steps, callback=Hooks())
        train_time, steps = clock.now(), int(model.num_timesteps)
        final = evaluate(cfg.final_eval_episodes)
        log.evaluation(final, steps, train_time)
        model.save(out / "sac_model.zip")
    finally:
        env.close()
        eval_env.close()
    if bar_task is not None:
        bar.update(bar_task, completed=budget or cfg.env_steps)
    return {"final_eval": final, "env_steps": steps, "updates": int(model._n_updates), "episodes": state["episodes"],
            "train_time_s": train_time, "eval_time_s": clock.paused_s, "control_hz": float(base.control_hz)}


def _SuccessReward(env):
    """`env` whose reward is 1.0 on success steps, else 0 (reward=success: the residual runs' default)."""
    import gymnasium

    class SuccessReward(gymnasium.Wrapper):
        def step(self, action):
            obs, _, terminated, truncated, info = self.env.step(action)
            return obs, float(info["success"]), terminated, truncated, info

    return SuccessReward(env)


def write_results(out: Path, log, result: dict, cfg: SB3BaselineConfig, task_name: str, wall_time_s: float) -> None:
    """metrics.json through the residual runs' writer (robot_rl.rl.train.write_results), and curves.png."""
    import stable_baselines3

    from robot_rl.rl.train import write_results as write_run_results

    write_run_results(out, log, result, {
        "mode": "sac", "algorithm": f"stable-baselines3 {stable_baselines3.__version__} SAC", "task": task_name,
        "reward": cfg.reward, "wall_time_s": wall_time_s, "config": dataclasses.asdict(cfg)})
    log.plot(out / "curves.png", ["eval/success_rate", "rollout/success_rate", "train/critic_loss",
                                  "perf/env_steps_per_s"], title=f"SB3 SAC {task_name}")


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if any(a in ("-h", "--help") for a in argv):
        print(__doc__)
        return
    try:
        cfg = parse_args(argv)
        sb3_sac()
    except (ValueError, TypeError, ImportError) as e:
        fail(str(e))
    out = Path(cfg.out)
    if not vacant(out):
        fail(f"out={out} already exists and is not an empty directory; give a new out=PATH (runs are not resumed)")
    from robot_rl import sim

    try:
        task_name = sim.env_config(dict(task=cfg.task, **cfg.env)).task_name  # the task, or the gymnasium env's id
    except (sim.ConfigError, TypeError, ValueError) as e:
        fail(f"env: {e}")

    from robot_rl.common.atomic import atomic_write_text
    from robot_rl.common.run_dir import hold
    from robot_rl.common.run_log import RunLog

    t0 = time.perf_counter()
    out.mkdir(parents=True, exist_ok=True)
    with hold(out):
        import json

        atomic_write_text(out / "config.json", json.dumps(dataclasses.asdict(cfg), indent=2) + "\n")
        log = RunLog(out)
        with progress_bar() as bar:
            result = train(cfg, log, bar)
        write_results(out, log, result, cfg, task_name, time.perf_counter() - t0)
        log.close()
    final = result["final_eval"]
    lo, hi = final["success_ci95"]
    print(f"{task_name} (SB3 SAC): {result['env_steps']} env steps, {result['updates']} updates, "
          f"{result['train_time_s']:.0f} s of training; success {final['success_rate']:.3f} (95% CI {lo:.2f}-{hi:.2f}) "
          f"over {final['episodes']} episodes")
    print(f"run dir: {out}")


if __name__ == "__main__":
    main()
