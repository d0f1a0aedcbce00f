"""robot-rl-quickstart: the stack on one task in one command (stages in robot_rl/quickstart.py).

    robot-rl-quickstart                         # lift: expert -> 100 noisy demos -> diffusion BC -> evaluation
                                                # -> 5 min of residual RL -> evaluation
    robot-rl-quickstart task=push bc.steps=3000 name=push
    robot-rl-quickstart stages=[expert]         # only evaluate the scripted expert

Writes runs/quickstart/<name>/ (rerun: finished stages are reused, a killed BC or residual stage resumes from its last
checkpoint; force=true redoes them).

Demonstrations with fewer than 2 successful episodes (robot_rl.data.collect.MIN_SUCCESSES: too few for BC and the
reward models) stop the run at the demos stage, before any training, with exit code 2 and one line naming the
measured success, the randomization ranges in force and what to change (as robot-rl-collect does).
"""

from __future__ import annotations

import time

from omegaconf import DictConfig

from robot_rl.common.cli import fail, hydra_command, number, or_fail, progress_bar, whole
from robot_rl.cli.common import (apply_recommended, env_config, hold_run_dir, make_env, resume_or_fail,
                                 set_torch_threads)
from robot_rl.cli.train_bc import bc_config, open_store, policy_config
from robot_rl.cli.train_residual import guard_summary, rl_config, run_with_budget_bar
from robot_rl.common.run_dir import current_run_dir, write_config, write_metrics


def reward_config(node):
    """Validated RewardTrainConfig from the quickstart's `reward` node (schema/train_reward + its changes)."""
    from robot_rl.common.config import from_mapping
    from robot_rl.reward.train import RewardTrainConfig

    return or_fail(from_mapping, RewardTrainConfig, node, "reward")


def _check(cfg: DictConfig):
    from robot_rl.quickstart import STAGES

    env_cfg = env_config(cfg.env)
    stages = list(cfg.stages)
    if not stages or stages != list(STAGES[: len(stages)]):
        fail(f"stages={stages} must be a prefix of {list(STAGES)}")
    for k in ("episodes", "demos", "rollouts", "deploy_episodes"):
        whole(k, cfg[k], 1)
    for k in ("eval_seed", "seed", "videos", "torch_threads"):
        whole(k, cfg[k], 0)
    if cfg.videos > env_cfg.num_envs:
        fail(f"videos={cfg.videos} must be <= env.num_envs={env_cfg.num_envs}")
    number("expert_noise", cfg.expert_noise)
    number("demo_noise", cfg.demo_noise)
    if env_cfg.backend == "gymnasium" and "deploy" in stages:
        print("deploy: skipped (the DDS dry run drives one of our robots; a gymnasium env has none)")
        stages.remove("deploy")
    return env_cfg, stages


@hydra_command("quickstart")
def main(cfg: DictConfig) -> None:
    apply_recommended(cfg, "quickstart")  # the task's own settings (sim Task.recommended)
    env_cfg, stages = _check(cfg)
    policy_cfg = policy_config(cfg.policy) if "bc" in stages else None
    run_dir = current_run_dir()
    demos_path = run_dir / "demos" / "episodes.zarr"
    bc_cfg = bc_config(cfg.bc, env_cfg, str(demos_path), where="bc.") if "bc" in stages else None
    rl_cfg = rl_config(cfg.rl) if "residual" in stages else None
    reward_cfg = reward_config(cfg.reward) if "reward" in stages else None
    set_torch_threads(int(cfg.torch_threads))
    with hold_run_dir(run_dir):  # one quickstart per run dir (runs/quickstart/<name>)
        write_config(run_dir, cfg)

        from robot_rl.policies.expert import ExpertPolicy
        from robot_rl.evaluation import evaluate_policy
        from robot_rl.quickstart import Pipeline, StageFailed

        t0 = time.perf_counter()
        env = make_env(env_cfg)
        try:
            with progress_bar() as bar:
                def evaluate(policy, label, out, videos=0):
                    task = bar.add_task(f"{label}: evaluate", total=int(cfg.episodes))
                    return evaluate_policy(env, policy, int(cfg.episodes), seed=int(cfg.eval_seed), videos=videos,
                                           video_dir=out / "videos", progress=lambda n: bar.advance(task, n))

                def expert(out):
                    try:
                        pol = ExpertPolicy(env, noise=float(cfg.expert_noise), seed=int(cfg.seed), path=cfg.expert_path)
                    except ValueError as e:  # no expert for this task, or an action space experts cannot drive
                        raise StageFailed(str(e)) from None
                    return summary(evaluate(pol, "expert", out))

                def demos(out):
                    from robot_rl.data import EpisodeStore
                    from robot_rl.data.collect import collect, too_few_successes

                    task = bar.add_task("demos: record", total=int(cfg.demos))
                    with EpisodeStore.open(demos_path, mode="a") as store:
                        r = collect(env, ExpertPolicy(env, noise=float(cfg.demo_noise), seed=int(cfg.seed),
                                                 path=cfg.expert_path).expert,
                                    store, int(cfg.demos), seed=int(cfg.seed), source="expert",
                                    metadata={"expert_noise": float(cfg.demo_noise)},
                                    progress=lambda n: bar.advance(task, n))
                    problem = too_few_successes(r, env_cfg.randomization, "demo_noise", float(cfg.demo_noise),
                                                noiseless=pipe.results.get("expert"))
                    if problem is not None:  # stop before BC trains on demonstrations that never do the task
                        raise StageFailed(f"demos: {problem}")
                    return {"store": str(demos_path), "noise": float(cfg.demo_noise), **r}

                def bc(out):
                    from robot_rl.common.run_log import RunLog
                    from robot_rl.train_bc import BCWorkspace, write_results

                    store = open_store(str(demos_path), env_cfg, env.obs_dims)
                    ws = BCWorkspace(out, bc_cfg, policy_cfg, env, store)
                    # a stage killed part-way continues from its last checkpoint
                    resumed_from = ws.step if resume_or_fail(ws) else None
                    log = RunLog(out, resume_step=resumed_from)
                    result = ws.run(log, bar)
                    write_results(out, log, result, {"task": env_cfg.task_name, "data": str(demos_path),
                                                     "episodes": store.n_episodes})
                    log.close()
                    store.close()
                    return {"policy": str(out / "policy"), "steps": result["steps"], "final_loss": result["final_loss"],
                            "train_time_s": result["train_time_s"], "resumed_from": resumed_from}

                def eval_bc(out):
                    from robot_rl.policies import load_policy

                    policy = load_policy(run_dir / "bc" / "policy")
                    return summary(evaluate(policy, "BC policy", out, videos=int(cfg.videos)))

                def rollouts(out):
                    from robot_rl.policies import load_policy
                    from robot_rl.policies.runner import PolicyRunner
                    from robot_rl.data import EpisodeStore
                    from robot_rl.data.collect import collect, policy_metadata

                    task = bar.add_task("rollouts: record BC episodes", total=int(cfg.rollouts))
                    path = out / "episodes.zarr"
                    runner = PolicyRunner(load_policy(run_dir / "bc" / "policy"), env.num_envs, env=env)
                    with EpisodeStore.open(path, mode="a") as store:
                        r = collect(env, runner, store, int(cfg.rollouts), seed=int(cfg.seed) + 1, source="policy",
                                    metadata=policy_metadata(run_dir / "bc" / "policy", runner.policy),
                                    progress=lambda n: bar.advance(task, n))
                    return {"store": str(path), **r}

                def reward(out):
                    from robot_rl.data import EpisodeStore
                    from robot_rl.reward.model import CHECKPOINT_DIR, RewardSpec
                    from robot_rl.reward.episodes import load_episodes
                    from robot_rl.reward.train import train_reward
                    from robot_rl.common.run_log import RunLog

                    stores = [EpisodeStore.open(demos_path), EpisodeStore.open(run_dir / "rollouts" / "episodes.zarr")]
                    data = load_episodes(stores, RewardSpec(task=env_cfg.task_name, obs_dims=dict(env.obs_dims)))
                    log = RunLog(out)
                    spec = RewardSpec(task=env_cfg.task_name, obs_dims=dict(env.obs_dims))
                    _, m = train_reward(out, reward_cfg, data, spec, log, bar)
                    write_metrics(out, {"task": env_cfg.task_name, **m, "history": log.history_json()})
                    log.close()
                    for st in stores:
                        st.close()
                    p, c = m["progress"], m["classifier"]
                    return {"reward_model": str(out / CHECKPOINT_DIR), "progress_spearman": p["spearman"],
                            "classifier_auroc": c["auroc"], "classifier_fpr": c["fpr"], "classifier_tpr": c["tpr"],
                            "threshold": c["threshold"], "test_episodes": m["splits"]["test"]["episodes"]}

                def residual(out):
                    from robot_rl.policies import load_policy
                    from robot_rl.rl.train import ResidualWorkspace, write_results
                    from robot_rl.common.run_log import RunLog

                    store = open_store(str(demos_path), env_cfg, env.obs_dims)
                    ws = ResidualWorkspace(out, rl_cfg, env, load_policy(run_dir / "bc" / "policy"), demo_store=store)
                    # a stage killed part-way continues from its last checkpoint
                    resumed_from = ws.env_steps if resume_or_fail(ws) else None
                    log = RunLog(out, resume_step=resumed_from)
                    result = run_with_budget_bar(ws, log, bar, "residual RL")
                    write_results(out, log, result, {"task": env_cfg.task_name, "base": str(run_dir / "bc" / "policy"),
                                                     "demos": str(demos_path)})
                    log.close()
                    store.close()
                    summary_ = {"policy": str(out / "policy"), "env_steps": result["env_steps"],
                                "updates": result["updates"], "train_time_s": result["train_time_s"],
                                "reward": rl_cfg.reward, "interventions": rl_cfg.interventions,
                                "resumed_from": resumed_from}
                    if ws.hil is not None:
                        summary_.update(human_fraction=ws.hil.fraction, human_steps=ws.hil.total_intervention_steps)
                    if result.get("guard"):  # learned rewards: what the labels and checks cost and decided
                        summary_.update(guard_summary(result))
                    return summary_

                def eval_residual(out):
                    from robot_rl.policies import load_policy

                    policy = load_policy(run_dir / "residual" / "policy")
                    return summary(evaluate(policy, "BC + residual", out, videos=int(cfg.videos)))

                def deploy(out):
                    from robot_rl.dry_run import dry_run, env_overrides

                    task = bar.add_task("deploy: dry run over DDS (episodes)", total=int(cfg.deploy_episodes))
                    return dry_run(out, run_dir / "residual" / "policy", env_cfg.task_name, int(cfg.deploy_episodes),
                                   seed=int(cfg.eval_seed), progress=lambda n: bar.advance(task, n),
                                   env_args=env_overrides(env_cfg))

                pipe = Pipeline(run_dir, force=bool(cfg.force))
                for name, fn in (("expert", expert), ("demos", demos), ("bc", bc), ("eval_bc", eval_bc),
                                 ("rollouts", rollouts), ("reward", reward), ("residual", residual),
                                 ("eval_residual", eval_residual), ("deploy", deploy)):
                    if name in stages:
                        pipe.stage(name, fn, resumable=name in ("bc", "residual"))
        except StageFailed as e:
            fail(str(e))
        finally:
            env.close()
        from robot_rl.report import write_report

        wall = time.perf_counter() - t0
        report, _ = write_report(run_dir, pipe.results, title=f"robot_rl quickstart: {env_cfg.task_name}",
                                 meta={"task": env_cfg.task_name, "backend": env_cfg.backend, "wall time (s)": wall})
        _print(pipe.results, env_cfg, wall, run_dir)
        print(f"report: {report}")


def summary(m: dict) -> dict:
    return {k: m[k] for k in ("episodes", "success_rate", "success_ci95", "mean_return", "mean_length", "seed")} | \
        ({"videos": m["videos"]} if "videos" in m else {})


def _print(results: dict, env_cfg, wall: float, run_dir) -> None:
    task = f"{env_cfg.task_name} / {env_cfg.backend}"
    for name, label in (("expert", "scripted expert"), ("eval_bc", "diffusion BC"),
                        ("eval_residual", "BC + residual RL")):
        if name in results:
            r = results[name]
            lo, hi = r["success_ci95"]
            reused = " (reused)" if r.get("reused") else ""
            print(f"{task}: {label} success rate {r['success_rate']:.3f} (95% CI {lo:.2f}-{hi:.2f}) over "
                  f"{r['episodes']} episodes{reused}")
    if "demos" in results:
        d = results["demos"]
        print(f"demos: {d['episodes']} episodes, {d['steps']} steps, noise {d['noise']}, success {d['success_rate']:.2f}")
    if "reward" in results:
        r = results["reward"]
        sp = "n/a" if r["progress_spearman"] is None else f"{r['progress_spearman']:.3f}"
        print(f"reward models: Spearman(progress, true progress) {sp}, classifier AUROC {r['classifier_auroc']:.3f}, "
              f"FPR {r['classifier_fpr']:.4f} at its threshold")
    if "residual" in results:
        r = results["residual"]
        hil = f", human in control of {r['human_fraction']:.1%} of steps" if "human_fraction" in r else ""
        print(f"residual RL: {r['env_steps']} env steps, {r['updates']} updates, "
              f"{r['train_time_s']:.0f} s of training, reward={r['reward']}{hil}")
        if "operator_labels" in r:
            print(f"  operator labels {r['operator_labels']} ({r['labelled_training_episodes']} training episodes, "
                  f"{r['checked_episodes']} checked), {r['classifier_refits']} classifier refits, {r['rollbacks']} "
                  f"rollbacks; robot minutes {r['robot_minutes']:.1f}; policy/ from env step "
                  f"{r['policy_from_env_step']} "
                  f"(checked {r['policy_checked_success']:.2f}, the base {r['base_checked_success']:.2f})")
            for w in r["warnings"]:
                print(f"  warning: {w}")
    if "deploy" in results:
        r = results["deploy"]
        print(f"deployment dry run over DDS: {r['successes']}/{r['episodes']} successes, tick lateness p99 "
              f"{r['p99_lateness_ms']:.3f} ms, obs-to-command p99 {r['obs_to_cmd_p99_ms']:.3f} ms, "
              f"missed ticks {r['missed_ticks']}")
    print(f"wall time {wall:.0f} s; run dir: {run_dir}")


if __name__ == "__main__":
    main()
