"""Env steps/s of both backends against raw physics of the same model, measured in one run.

    python bench/sim_throughput.py [--quick] [--task lift] [--robot primitive,panda_menagerie] [--backend mujoco]
                                   [--num-envs 16] [--rounds 3]

MuJoCo C: the batched env (IK, task logic, auto-reset, rollout-based physics) vs `mujoco.rollout` of the
same model with the same thread count and the same number of physics steps.
MJX: the jitted functional env step vs a vmapped, jitted loop of `mjx.step` (same substeps, same N).
`mjx_jit_seconds` is the cold XLA compile of the env step (no persistent cache). Figures are control
steps per second summed over envs; the raw figures are physics steps / substeps. Several robots (env.robot) are
measured back to back, each through every N and backend, so their figures share the machine's conditions; with
--rounds k they take turns k times (on a busy machine) and each figure is the median of its k. The JSON then has one
summary per robot under "robots", and every round's under "rounds". Last line: JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time

import numpy as np


def _timed(fn, min_seconds: float, min_iters: int = 3) -> float:
    """Seconds per call of fn(), averaged over at least min_seconds."""
    fn()
    n, start = 0, time.perf_counter()
    while n < min_iters or time.perf_counter() - start < min_seconds:
        fn()
        n += 1
    return (time.perf_counter() - start) / n


def bench_cpu(task: str, n: int, seconds: float, robot: str = "primitive") -> dict:
    import mujoco
    from mujoco import rollout

    from robot_rl import sim

    env = sim.make(task, backend="mujoco", num_envs=n, robot=robot)
    env.reset(0)
    rng = np.random.default_rng(0)
    actions = rng.uniform(-1, 1, (64, n, env.action_dim)).astype(np.float32)
    i = [0]

    def env_step():
        env.step(actions[i[0] % 64])
        i[0] += 1

    env_s = _timed(env_step, seconds)
    threads = len(env._thread_datas)
    k = env.substeps
    datas = [mujoco.MjData(env.model) for _ in range(threads)]
    state = env.state.copy()
    control = np.repeat(env._control[:, :1], k, axis=1)
    models = [env.model] * n
    with rollout.Rollout(nthread=threads) as r:
        raw_s = _timed(lambda: r.rollout(models, datas, state, control, control_spec=env._control_spec, nstep=k), seconds)
    env.close()
    return {"env_steps_per_s": n / env_s, "raw_steps_per_s": n / raw_s, "threads": threads,
            "env_vs_raw": raw_s / env_s}


def bench_mjx(task: str, n: int, seconds: float, robot: str = "primitive", device: str = "cpu") -> dict:
    import jax
    import jax.numpy as jnp
    from mujoco import mjx

    from robot_rl import sim
    from robot_rl.sim import rng as srng

    env = sim.make(task, backend="mjx", num_envs=n, robot=robot, device=device)
    e = env.mjx
    keys = jax.device_put(jnp.asarray(srng.env_key(np, 0, np.arange(n))), e.device)
    eps = jax.device_put(jnp.zeros(n, jnp.uint32), e.device)
    t = time.perf_counter()
    reset = e.reset.lower(keys, eps).compile()
    reset_jit = time.perf_counter() - t
    state = reset(keys, eps)
    actions = jax.device_put(np.random.default_rng(0).uniform(-1, 1, (n, env.action_dim)).astype(np.float32), e.device)
    t = time.perf_counter()
    step = e.step.lower(state, actions).compile()
    step_jit = time.perf_counter() - t
    box = [state]

    def env_step():
        box[0] = step(box[0], actions)
        jax.block_until_ready(box[0].reward)

    env_s = _timed(env_step, seconds)
    k = env.cfg.substeps
    # Same XLA options as the env (on CPU: the legacy fusion emitter, see sim/backends/mjx.py), so the ratio
    # compares our env code with raw physics, not two compilers.
    raw_fn = jax.jit(jax.vmap(lambda d: jax.lax.fori_loop(0, k, lambda _, x: mjx.step(e.model, x), d)),
                     compiler_options=e.compiler_options)
    data = box[0].data
    t = time.perf_counter()
    raw = raw_fn.lower(data).compile()
    raw_jit = time.perf_counter() - t
    raw_box = [data]

    def raw_step():
        raw_box[0] = raw(raw_box[0])
        jax.block_until_ready(raw_box[0].qpos)

    raw_s = _timed(raw_step, seconds)
    return {"env_steps_per_s": n / env_s, "raw_steps_per_s": n / raw_s, "env_vs_raw": raw_s / env_s,
            "step_jit_s": step_jit, "reset_jit_s": reset_jit, "raw_jit_s": raw_jit}


def bench_robot(task: str, robot: str, cpu_ns, mjx_ns, seconds: float) -> dict:
    """Figures of one robot; prints a line per measurement, returns the summary."""
    out = {"cpu": {}, "mjx": {}}
    for n in cpu_ns:
        r = out["cpu"][n] = bench_cpu(task, n, seconds, robot)
        print(f"{robot} mujoco N={n:4d}: env {r['env_steps_per_s']:9.0f} steps/s  raw {r['raw_steps_per_s']:9.0f}  "
              f"ratio {r['env_vs_raw']:.2f}", flush=True)
    for n in mjx_ns:
        r = out["mjx"][n] = bench_mjx(task, n, seconds, robot)
        print(f"{robot} mjx    N={n:4d}: env {r['env_steps_per_s']:9.0f} steps/s  raw {r['raw_steps_per_s']:9.0f}  "
              f"ratio {r['env_vs_raw']:.2f}  step jit {r['step_jit_s']:.1f}s reset jit {r['reset_jit_s']:.1f}s",
              flush=True)
    summary = {}
    if 16 in out["cpu"]:
        summary["cpu_env_vs_raw"] = round(out["cpu"][16]["env_vs_raw"], 3)
    if 16 in out["mjx"]:
        summary.update(mjx_env_vs_raw=round(out["mjx"][16]["env_vs_raw"], 3),
                       mjx_jit_seconds=round(out["mjx"][16]["step_jit_s"], 1),
                       mjx_reset_jit_seconds=round(out["mjx"][16]["reset_jit_s"], 1))
    for b in ("cpu", "mjx"):
        summary[f"{b}_env_steps_per_s"] = {str(n): round(r["env_steps_per_s"]) for n, r in out[b].items()}
        summary[f"{b}_raw_steps_per_s"] = {str(n): round(r["raw_steps_per_s"]) for n, r in out[b].items()}
    return summary


def main() -> None:
    from robot_rl.sim.robot import ROBOTS

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="N in {1, 16}, MJX at N=16 only, shorter timings")
    ap.add_argument("--task", default="lift")
    ap.add_argument("--robot", default="primitive",
                    help=f"env.robot, or several comma-separated, measured back to back ({', '.join(ROBOTS)})")
    ap.add_argument("--backend", default="both", choices=("both", "mujoco", "mjx"))
    ap.add_argument("--num-envs", default="", help="comma-separated N to measure (default: by --quick)")
    ap.add_argument("--rounds", type=int, default=1, help="times the robots take turns; figures are medians")
    args = ap.parse_args()
    robots = [r for r in args.robot.split(",") if r]
    bad = [r for r in robots if r not in ROBOTS]
    if bad or not robots:
        ap.error(f"--robot {args.robot!r}: valid robots are {', '.join(ROBOTS)}")
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    seconds = 1.0 if args.quick else 3.0
    ns = tuple(int(n) for n in args.num_envs.split(",") if n)
    cpu_ns = (ns or ((1, 16) if args.quick else (1, 16, 256))) if args.backend != "mjx" else ()
    mjx_ns = (ns or ((16,) if args.quick else (1, 16, 256))) if args.backend != "mujoco" else ()
    rounds = [{r: bench_robot(args.task, r, cpu_ns, mjx_ns, seconds) for r in robots} for _ in range(args.rounds)]
    per_robot = {r: _median_summary([rd[r] for rd in rounds]) for r in robots}
    common = {"task": args.task, "cores": os.cpu_count(), "machine": platform.machine(), "quick": args.quick,
              "rounds": rounds if args.rounds > 1 else None}
    if len(robots) == 1:
        print(json.dumps({**per_robot[robots[0]], "robot": robots[0], **common}))
    else:
        print(json.dumps({"robots": per_robot, **common}))


def _median_summary(summaries: list[dict]) -> dict:
    """Each figure (nested by N) of several rounds' summaries: its median."""
    out = {}
    for k, v in summaries[0].items():
        if isinstance(v, dict):
            out[k] = {n: round(float(np.median([s[k][n] for s in summaries]))) for n in v}
        else:
            out[k] = round(float(np.median([s[k] for s in summaries])), 3)
    return out


if __name__ == "__main__":
    main()
