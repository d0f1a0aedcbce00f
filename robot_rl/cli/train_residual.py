"""robot-rl-train-residual: residual off-policy RL on a frozen base policy, and its baselines.

    robot-rl-train-residual task=lift base=runs/train_bc/<run>/policy demos=data/lift.zarr
    robot-rl-train-residual task=lift mode=scratch demos=data/lift.zarr        # RL from scratch, same harness
    robot-rl-train-residual task=lift mode=base base=runs/train_bc/<run>/policy  # the base alone, evaluated

Writes runs/train_residual/<timestamp>-<name>/ (see robot_rl/rl/train.py): policy/ (base + residual, a
BasePolicy checkpoint that robot-rl-eval and robot-rl-deploy load unchanged), tb/, metrics.json, curves.png,
checkpoints/, videos/. Run it again with hydra.run.dir=<that directory> to resume. Evaluations run on a
separate env (eval_num_envs), so training episodes are never cut by them.
distributed.actors=N collects with N actor processes on Ray (robot_rl/rl/distributed/); same learner and run dir.
distributed.robots=[{name: arm1}] adds robot actors: the deploy node (`deploy` config) on a robot (real/robot_actor.py).
`python -m robot_rl.rl.compare` plots several runs' success curves on one figure; a seed sweep (-m rl.seed=0,1,2)
is one curve, mean and band: label=runs/train_residual/multirun/<date>/<time>.
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from robot_rl.common.config import from_mapping
from robot_rl.common.cli import fail, hydra_command, progress_bar, warn, whole
from robot_rl.cli.common import (
    apply_recommended, env_config, hold_run_dir, load_checkpoint, make_env, resume_or_fail, set_torch_threads,
)
from robot_rl.common.run_dir import current_run_dir, write_config, write_metrics

MODES = ("residual", "scratch", "base")


def rl_config(node):
    """Validated ResidualRLConfig from the `rl` node."""
    from robot_rl.rl.train import ResidualRLConfig

    try:
        return from_mapping(ResidualRLConfig, node, "rl")
    except (TypeError, ValueError) as e:
        fail(str(e).replace("residual RL", "rl"))


def distributed_config(node):
    """Validated DistributedConfig from the `distributed` node."""
    from robot_rl.rl.distributed import DistributedConfig

    try:
        return from_mapping(DistributedConfig, node, "distributed")
    except (TypeError, ValueError) as e:
        fail(str(e))


def _configs(cfg: DictConfig):
    env_cfg = env_config(cfg.env)
    if cfg.mode not in MODES:
        fail(f"mode={cfg.mode!r}; valid: {', '.join(MODES)}")
    rl = rl_config(cfg.rl)
    if cfg.mode == "scratch":
        if cfg.base:
            fail("mode=scratch trains without a base policy; drop base=... (or use mode=residual)")
    elif not (isinstance(cfg.base, str) and cfg.base):
        fail(f"mode={cfg.mode} needs base=PATH, a BasePolicy checkpoint directory (robot-rl-train-bc writes "
             f"<run>/policy)")
    if cfg.demos is not None and not (isinstance(cfg.demos, str) and cfg.demos):
        fail(f"demos={cfg.demos!r} must be an episode store path or null")
    eval_n = whole("eval_num_envs", cfg.eval_num_envs, 0) or env_cfg.num_envs
    if rl.videos > eval_n:
        fail(f"rl.videos={rl.videos} must be <= the evaluation envs ({eval_n}: eval_num_envs or env.num_envs)")
    whole("torch_threads", cfg.torch_threads, 0)
    dist = distributed_config(cfg.distributed)
    if (dist.actors > 0 or dist.robots) and cfg.mode != "base":
        try:
            import ray  # noqa: F401
        except ImportError:
            fail(f"distributed.actors={dist.actors} needs Ray: pip install 'ray>=2.40' (or distributed.actors=0)")
    if dist.robots and cfg.mode != "base":
        _check_robots(cfg, rl, dist)
    return env_cfg, rl, dataclasses.replace(env_cfg, num_envs=eval_n), dist


def _check_robots(cfg: DictConfig, rl, dist) -> None:
    """Robot actors: learned rewards, a base, and every robot's deploy config valid (before Ray starts)."""
    from robot_rl.real.config import DeployConfigError, deploy_config
    from robot_rl.rl.distributed import check_robot_config

    try:
        check_robot_config(rl, cfg.base if cfg.mode == "residual" else None)
    except ValueError as e:
        fail(str(e))
    for robot in dist.robots:
        try:
            deploy_config(OmegaConf.merge(cfg.deploy, robot.deploy))
        except DeployConfigError as e:
            fail(f"distributed.robots[{robot.name}]: {e}")


def run_with_budget_bar(ws, log, bar, label: str) -> dict:
    """ws.run(log) with a progress bar over its budget: training seconds when rl.time_budget_s is set (the
    binding limit on CPUs), else env steps; full at the end either way."""
    rl = ws.cfg
    by_time = rl.time_budget_s > 0
    total = rl.time_budget_s if by_time else rl.env_steps
    task = bar.add_task(label + (" (training s)" if by_time else " (env steps)"), total=total)
    result = ws.run(log, lambda steps: bar.update(task, completed=ws.train_time if by_time else steps))
    bar.update(task, completed=total)
    return result


def _evaluate_base(run_dir: Path, env_cfg, eval_env, base, rl, cfg, t0: float) -> dict:
    """mode=base: the base alone through the same evaluation as every other run, written as a one-point curve."""
    from robot_rl.evaluation import evaluate_policy

    episodes = rl.final_eval_episodes or rl.eval_episodes
    with progress_bar() as bar:
        task = bar.add_task(f"base alone {env_cfg.task_name}", total=episodes)
        m = evaluate_policy(eval_env, base, episodes, seed=rl.eval_seed, videos=rl.videos,
                            video_dir=run_dir / "videos", progress=lambda n: bar.advance(task, n))
    write_metrics(run_dir, {
        "mode": "base", "task": env_cfg.task_name, "base": str(cfg.base), "success_rate": m["success_rate"],
        "success_ci95": m["success_ci95"], "eval": {k: v for k, v in m.items() if k != "episode_ids"},
        "eval_episode_ids": m["episode_ids"], "history": {"eval/success_rate": [[0, m["success_rate"]]]},
        "wall_time_s": time.perf_counter() - t0,
    })
    return m


@hydra_command("train_residual")
def main(cfg: DictConfig) -> None:
    apply_recommended(cfg, "train_residual")  # the task's own settings (sim Task.recommended)
    env_cfg, rl, eval_env_cfg, dist = _configs(cfg)
    set_torch_threads(int(cfg.torch_threads))
    run_dir = current_run_dir()
    t0 = time.perf_counter()

    from robot_rl.policies import SpecMismatch
    from robot_rl.common.checkpoint import CheckpointError
    from robot_rl.cli.train_bc import open_store
    from robot_rl.reward.online import RewardModelRefused
    from robot_rl.rl.train import ResidualWorkspace, from_scratch, write_results
    from robot_rl.common.run_log import RunLog

    env = make_env(env_cfg)
    eval_env = make_env(eval_env_cfg)
    store = None
    try:
        base = None if cfg.mode == "scratch" else load_checkpoint(cfg.base, env, str(cfg.device))
        if cfg.mode == "base":
            with hold_run_dir(run_dir):
                write_config(run_dir, cfg)
                m = _evaluate_base(run_dir, env_cfg, eval_env, base, rl, cfg, t0)
            lo, hi = m["success_ci95"]
            print(f"{env_cfg.task_name}: base alone success {m['success_rate']:.3f} (95% CI {lo:.2f}-{hi:.2f}) over "
                  f"{m['episodes']} episodes")
            print(f"run dir: {run_dir}")
            return
        if cfg.demos:
            cams = [k[len("images/"):] for k in base.spec.image_shapes] if base is not None else []
            # the base relabels the demos: they must hold its cameras and instructions too
            store = open_store(cfg.demos, env_cfg, env.obs_dims, cams, base is not None and base.spec.instruction)
        if cfg.mode == "scratch":
            rl = from_scratch(rl)
        stops: tuple[type[Exception], ...] = (FloatingPointError,)  # errors that end training with one line
        try:  # a reward model (rl.reward_model) for another task or spec, or a broken one, stops here
            if dist.actors > 0 or dist.robots:
                from robot_rl.rl.distributed import ActorFailure, DistributedWorkspace

                robot_actor = None
                if dist.robots:
                    from robot_rl.real.robot_actor import RobotActor as robot_actor
                stops += (ActorFailure,)  # an actor that cannot start, or keeps dying
                ws = DistributedWorkspace(run_dir, rl, env, base, dist, demo_store=store, eval_env=eval_env,
                                          base_path=cfg.base if base is not None else None,
                                          deploy=OmegaConf.to_container(cfg.deploy, resolve=True),
                                          robot_actor=robot_actor)
                where = dist.address or "a local Ray instance"
                robots = f" + robot actors {', '.join(r.name for r in dist.robots)}" if dist.robots else ""
                print(f"distributed: {dist.actors} env actors x {env_cfg.num_envs} envs{robots} on {where}")
            else:
                ws = ResidualWorkspace(run_dir, rl, env, base, demo_store=store, eval_env=eval_env)
        except (SpecMismatch, CheckpointError, RewardModelRefused) as e:
            fail(str(e))
        warnings = []
        if ws.learned_reward is not None:  # the base's weights hash: hashed once, for the resume check
            from robot_rl.reward.model import rollout_mismatch

            msg = rollout_mismatch(ws.learned_reward.model, ws.resume_config["base"].get("sha256"), cfg.base)
            if msg:
                warn(msg)
                warnings.append(msg)
        with hold_run_dir(run_dir):  # one training per run dir; the resume check first, then any write
            resumed = resume_or_fail(ws)
            write_config(run_dir, cfg)
            log = RunLog(run_dir, resume_step=ws.env_steps if resumed else None)
            extra = {"mode": cfg.mode, "task": env_cfg.task_name, "base": cfg.base, "demos": cfg.demos,
                     "num_envs": env_cfg.num_envs, "resumed_from": ws.env_steps if resumed else None,
                     "warnings": warnings}
            ws.on_warning = warn  # a 0% base, a long stretch below the base: stderr now, metrics.json at the end
            if resumed:
                print(f"resuming {run_dir} from env step {ws.env_steps}")
            elif base is not None and ws.evaluates():  # s0 of this run, on the residual's final evaluation episodes
                with progress_bar() as bar:
                    task = bar.add_task(f"base alone {env_cfg.task_name}", total=rl.final_eval_episodes or rl.eval_episodes)
                    m0 = ws.evaluate_base(log, progress=lambda n: bar.advance(task, n))
                print(f"base alone: success {m0['success_rate']:.3f} over {m0['episodes']} episodes")
            try:
                with progress_bar() as bar:
                    result = run_with_budget_bar(ws, log, bar, f"{cfg.mode} RL {env_cfg.task_name}")
            except stops as e:
                fail(str(e))
            write_results(run_dir, log, result, {**extra, "wall_time_s": time.perf_counter() - t0})
            log.close()
    finally:
        if store is not None:
            store.close()
        env.close()
        eval_env.close()
    final = result["final_eval"]
    done = (f"{env_cfg.task_name} ({cfg.mode}): {result['env_steps']} env steps, {result['updates']} updates, "
            f"{result['train_time_s']:.0f} s of training")
    if final is not None:
        lo, hi = final["success_ci95"]
        done += f"; success {final['success_rate']:.3f} (95% CI {lo:.2f}-{hi:.2f}) over {final['episodes']} episodes"
    print(done)
    src = (final or {}).get("policy_from") or result.get("policy_from") or {}
    if src.get("which") == "best":
        last = (final or {}).get("last_eval")
        how = "checked" if src.get("by") == "checks" else "evaluated"
        print(f"policy/ is the best {how} policy, of env step {src['env_steps']}"
              + (f"; the last one scored {last['success_rate']:.3f}" if last else ""))
    if result.get("guard"):
        print(guard_line(result))
    print(f"policy: {run_dir / 'policy'}")
    print(f"run dir: {run_dir}")


def guard_summary(result: dict) -> dict:
    """reward=learned: the figures a report shows of the labels, checks and rollbacks (a training result's)."""
    g, lab = result["guard"], result["labels"]
    return {"operator_labels": lab["total"], "labelled_training_episodes": lab["labelled"],
            "training_episodes": lab["training_episodes"], "checked_episodes": lab["checked_episodes"],
            "classifier_refits": lab["refits"], "false_claims_labelled": lab["claimed_false"],
            "rollbacks": g["rollbacks"], "stopped_at": g["stopped_at"],
            "robot_minutes": result["robot_minutes"]["total"],
            "base_checked_success": g["base"]["success_rate"], "policy_checked_success": g["best"]["success_rate"],
            "policy_from_env_step": g["best"]["env_steps"], "warnings": list(result.get("warnings", []))}


def guard_line(result: dict) -> str:
    """reward=learned: the checks, rollbacks and the robot's cost (labels, minutes) in one line."""
    g, lab, mins = result["guard"], result["labels"], result["robot_minutes"]
    b, best = g["base"], g["best"]
    out = (f"checks: base {b['successes']}/{b['episodes']}, best {best['successes']}/{best['episodes']} at env step "
           f"{best['env_steps']}, {len(g['checks'])} checks, {g['rollbacks']} rollbacks")
    if g["stopped_at"] is not None:
        out += f", stopped at env step {g['stopped_at']}"
    return (out + f"; operator labels {lab['total']} ({lab['labelled']} of {lab['training_episodes']} training "
            f"episodes, {lab['checked_episodes']} checked), {lab['refits']} classifier refits; robot minutes "
            f"{mins['total']:.1f} ({mins['checks']:.1f} checking)")


if __name__ == "__main__":
    main()
