"""robot-rl-collect: record episodes of a scripted expert or a trained policy into an episode store, batched.

    robot-rl-collect task=peg_insert episodes=200 expert.noise=0.1 out=data/peg.zarr backend=mujoco
    robot-rl-collect task=lift policy=runs/results/lift-bc/policy episodes=200 out=data/lift-rollouts.zarr

With `policy=PATH` (any BasePolicy checkpoint) the episodes are that policy's rollouts, stored with
source="policy": successes and failures, the data success classifiers and progress models need.
Writes the store at `out` (appends if it exists) and runs/collect/<timestamp>-<name>/{config.yaml,
metrics.json}. A store that already holds episodes of the same collection (task, source, seed, settings),
e.g. from an interrupted run, is refused with the command that appends the rest under a new seed: the same
seed would record the same episodes again.

An expert's collection that records fewer than 2 successful episodes (all of them, when fewer were asked for;
robot_rl.data.collect.MIN_SUCCESSES: what BC and the reward models need at least) ends with exit code 2 and one
line naming the measured success, the randomization ranges in force and what to change (e.g. an
action_latency given in milliseconds instead of control ticks). The episodes it recorded stay in the store, which
is valid; the quickstart's demos stage stops on the same measure. Policy rollouts are not checked: their failures
are what they are collected for.
"""

from __future__ import annotations

import time
from pathlib import Path

from omegaconf import DictConfig

from robot_rl.common.cli import fail, hydra_command, number, progress_bar, whole
from robot_rl.common.atomic import vacant
from robot_rl.cli.common import env_config, make_env
from robot_rl.common.run_dir import current_run_dir, write_config, write_metrics


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
    policy = cfg.get("policy")
    if policy is not None and not (isinstance(policy, str) and policy):
        fail(f"policy={policy!r} must be a policy checkpoint directory (e.g. <train-bc run>/policy) or null for the "
             "scripted expert")
    return env_cfg


def _load_policy(path: str, env):
    """A PolicyRunner around the BasePolicy at `path`, checked against `env` (fails with one message)."""
    from robot_rl.policies import SpecMismatch, load_policy
    from robot_rl.policies.runner import PolicyRunner
    from robot_rl.common.checkpoint import CheckpointError

    try:
        policy = load_policy(path)
        policy.spec.check_env(env)
    except (CheckpointError, SpecMismatch) as e:
        fail(f"policy={path}: {e}")
    return PolicyRunner(policy, env.num_envs, env=env)  # env: the instruction of each episode


def _refuse_repeat(store, out: Path, task: str, source: str, seed: int, episodes: int, meta: dict) -> None:
    """Exit 2 with the command that appends new episodes when `store` holds episodes of this very collection."""
    import shlex

    from hydra.core.hydra_config import HydraConfig
    from robot_rl.data.collect import recorded_before

    done = recorded_before(store, task, source, seed, meta)
    if not done:
        return
    store.close()
    new = {"episodes": episodes - done if done < episodes else episodes, "seed": int(store.episode_attr("seed").max()) + 1,
           "out": str(out)}
    args = [a for a in HydraConfig.get().overrides.task if not a.startswith("hydra.")]
    args = [f"{k}={new.pop(k)}" if (k := a.split("=", 1)[0]) in new else a for a in args]
    args += [f"{k}={v}" for k, v in new.items()]
    what = (f"{done} of the {episodes} episodes this command records (an interrupted run?)" if done < episodes
            else f"{done} episodes of this collection, all this command records")
    fail(f"episode store {out} already holds {what}: task={task}, source={source}, seed={seed} and the same settings, so "
         f"running it again would store the same episodes twice. Append new episodes under a new seed: "
         f"robot-rl-collect {' '.join(shlex.quote(a) for a in args)}")


@hydra_command("collect")
def main(cfg: DictConfig) -> None:
    from robot_rl.data.episode_store import EpisodeStore, check_is_store
    from robot_rl.data.errors import StoreError

    t0 = time.perf_counter()
    env_cfg = _check_config(cfg)
    run_dir = current_run_dir()
    out = Path(cfg.out) if cfg.out is not None else run_dir / "episodes.zarr"
    if not vacant(out):
        try:
            check_is_store(out)  # refuse a non-store path before any env is built
        except StoreError as e:
            fail(str(e))

    from robot_rl.data.collect import collect, policy_metadata, too_few_successes
    from robot_rl.sim.experts import make_expert

    env = make_env(env_cfg)
    try:
        policy_path = cfg.get("policy")
        if policy_path is not None:
            actor, source, who = _load_policy(policy_path, env), "policy", "policy"
            meta = {"backend": env_cfg.backend, **policy_metadata(policy_path, actor.policy)}
        else:
            try:
                actor = make_expert(env, noise=float(cfg.expert.noise), seed=int(cfg.seed), path=cfg.expert.path)
            except ValueError as e:  # no expert for this task, or an action space experts cannot drive
                fail(str(e))
            source, who = "expert", "expert"
            meta = {"backend": env_cfg.backend, "expert_noise": float(cfg.expert.noise)}
        write_config(run_dir, cfg)  # the expert or policy is ready: the run is on
        try:
            store = EpisodeStore.open(out, mode="a", fsync=cfg.fsync)
        except StoreError as e:  # not a store, corrupted, damaged, or locked by another writer
            fail(str(e))
        _refuse_repeat(store, out, env_cfg.task_name, source, int(cfg.seed), int(cfg.episodes), meta)
        try:
            t_collect = time.perf_counter()
            with progress_bar() as bar:
                task = bar.add_task(f"{env_cfg.task_name} {who} -> {out.name}", total=cfg.episodes)
                result = collect(
                    env, actor, store, cfg.episodes, seed=int(cfg.seed), source=source, metadata=meta,
                    progress=lambda n: bar.advance(task, n),
                )
        except StoreError as e:  # the store holds episodes of another shape (e.g. another task)
            fail(str(e))
        finally:
            store.close()
        t_end = time.perf_counter()
    finally:
        env.close()
    problem = too_few_successes(result, env_cfg.randomization, "expert.noise", float(cfg.expert.noise)) \
        if source == "expert" else None

    metrics = {
        "task": env_cfg.task_name,
        "backend": env_cfg.backend,
        "num_envs": env_cfg.num_envs,
        "source": source,
        "policy": str(policy_path) if policy_path is not None else None,
        "expert_noise": float(cfg.expert.noise) if policy_path is None else None,
        "seed": int(cfg.seed),
        "store": str(out),
        **result,
        "wall_time_s": t_end - t0,  # config + env build (incl. any JIT compile) + collection
        "collect_time_s": t_end - t_collect,
        "steps_per_s": result["steps"] / max(t_end - t_collect, 1e-9),
    }
    write_metrics(run_dir, metrics)
    if problem is not None:
        fail(f"{problem} (the {result['episodes']} episodes are kept in {out}, a valid store)")
    print(
        f"{env_cfg.task_name} / {env_cfg.backend}: recorded {result['episodes']} episodes ({result['steps']} steps), "
        f"success rate {result['success_rate']:.3f}, into {out} (now {result['store_episodes']} episodes)"
    )
    print(f"run dir: {run_dir}")


if __name__ == "__main__":
    main()
