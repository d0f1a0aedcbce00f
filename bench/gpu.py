"""MJX on a GPU: env and raw `mjx.step` steps/s at 1 / 1,024 / 4,096 / 8,192 envs with cold JIT, then a short lift
residual run with the env on the device, in one call.

    python bench/gpu.py [--task lift] [--num-envs 1,1024,4096,8192] [--device cuda] [--seconds 2]
                        [--base runs/train_bc/<run>/policy] [--residual-seconds 120] [--residual-envs 16]
                        [--out DIR] [--deadline-s 300] [--hard-limit-s 0]

Each N goes through bench/sim_throughput.py's bench_mjx (the env's jitted functional step against a vmapped,
jitted loop of `mjx.step` with the same substeps, each compiled cold: a fresh persistent cache) and then the host
API (`BatchedEnv.step`: numpy actions in, numpy observations out, as training uses it). With --base, the residual
run is `robot-rl-train-residual task=<task> base=<base> env.backend=mjx env.device=<device>` on a wall-clock budget;
its metrics.json goes next to the figures. Figures are control steps per second summed over envs (physics steps
per second are these times env.substeps). An N that would start after --deadline-s is skipped, and the residual
run is shortened (or skipped) to end by --hard-limit-s, each recorded as such, so a time-limited machine still
returns what it measured. Each measurement is appended to DIR/gpu.jsonl as it finishes; the last line printed is
the JSON summary. Set XLA_PYTHON_CLIENT_PREALLOCATE=false: the residual run is a second JAX process on the GPU.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from sim_throughput import _timed, bench_mjx  # noqa: E402  (bench/ is not a package)

ROOT = Path(__file__).resolve().parents[1]


def device_facts(device: str) -> dict:
    import jax
    import mujoco

    from robot_rl.sim.backends.mjx import resolve_device

    d = resolve_device(device)
    facts = {"jax": jax.__version__, "mujoco": mujoco.__version__, "jax_device": str(d),
             "device_kind": getattr(d, "device_kind", d.platform), "python": platform.python_version(),
             "host_cores": os.cpu_count()}
    try:
        import importlib.metadata as md

        facts["mujoco_mjx"] = md.version("mujoco-mjx")
    except Exception:  # noqa: BLE001  (an unpackaged mjx: the figure says so)
        facts["mujoco_mjx"] = None
    if shutil.which("nvidia-smi"):
        q = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
                           capture_output=True, text=True)
        facts["nvidia_smi"] = q.stdout.strip()
    return facts


def bench_host_api(task: str, n: int, seconds: float, device: str) -> dict:
    """BatchedEnv.step steps/s: numpy actions in, numpy obs/reward/done/info out (what training calls)."""
    from robot_rl import sim

    env = sim.make(task, backend="mjx", num_envs=n, device=device)
    t = time.perf_counter()
    env.reset(0)
    reset_s = time.perf_counter() - t
    actions = np.random.default_rng(0).uniform(-1, 1, (64, n, env.action_dim)).astype(np.float32)
    i = [0]

    def step():
        env.step(actions[i[0] % 64])
        i[0] += 1

    t = time.perf_counter()
    step()  # from the persistent cache bench_mjx filled
    first_s = time.perf_counter() - t
    s = _timed(step, seconds)
    env.close()
    return {"host_env_steps_per_s": n / s, "host_first_step_s": first_s, "host_reset_s": reset_s}


def residual_run(task: str, base: str, device: str, seconds: float, num_envs: int, out: Path,
                 kill_after: float | None) -> dict:
    """A short robot-rl-train-residual run with the MJX env on `device`; its metrics.json and wall time. The run is
    killed after `kill_after` seconds (None: never), and says so."""
    run_dir = Path(tempfile.mkdtemp(prefix="gpu_residual_"))
    cmd = [sys.executable, "-m", "robot_rl.cli.train_residual", f"task={task}", f"base={base}", "name=gpu",
           "env.backend=mjx", f"env.device={device}", f"env.num_envs={num_envs}", f"device={device}",
           f"rl.time_budget_s={seconds}", "rl.eval_every=0", "rl.eval_episodes=100", "rl.final_eval_episodes=100",
           "rl.videos=0", f"hydra.run.dir={run_dir}"]
    print("$ " + " ".join(cmd), flush=True)
    t = time.perf_counter()
    try:
        p = subprocess.run(cmd, cwd=ROOT, text=True, capture_output=True, timeout=kill_after)
        rc, stdout, stderr = p.returncode, p.stdout, p.stderr
    except subprocess.TimeoutExpired as e:
        rc, stdout, stderr = f"killed after {kill_after:.0f} s", _text(e.stdout), _text(e.stderr)
    wall = time.perf_counter() - t
    (out / "residual.log").write_text(stdout + "\n--- stderr ---\n" + stderr)
    print(stdout[-3000:], stderr[-3000:], sep="\n", flush=True)
    r = {"residual_rc": rc, "residual_wall_s": round(wall, 1), "residual_cmd": " ".join(cmd[1:])}
    m = run_dir / "metrics.json"
    if m.is_file():
        shutil.copy(m, out / "residual_metrics.json")
        metrics = json.loads(m.read_text())
        r["residual_metrics"] = {k: metrics[k] for k in metrics if not isinstance(metrics[k], (list, dict))}
    return r


def _text(b) -> str:
    return b.decode(errors="replace") if isinstance(b, bytes) else (b or "")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--task", default="lift")
    ap.add_argument("--num-envs", default="1,1024,4096,8192")
    ap.add_argument("--device", default="cuda", help="env.device of the MJX env (cuda, cuda:1, cpu)")
    ap.add_argument("--seconds", type=float, default=2.0, help="timing window of each figure")
    ap.add_argument("--base", default="", help="BasePolicy checkpoint dir for the residual run (none: skipped)")
    ap.add_argument("--residual-seconds", type=float, default=120.0, help="the run's rl.time_budget_s")
    ap.add_argument("--residual-envs", type=int, default=16, help="the run's env.num_envs")
    ap.add_argument("--out", default="runs/bench_gpu", help="folder of gpu.jsonl and the residual run's metrics")
    ap.add_argument("--deadline-s", type=float, default=300.0, help="no N is measured after this many seconds")
    ap.add_argument("--hard-limit-s", type=float, default=0.0,
                    help="the residual run is shortened to end, and killed, by this many seconds (0: no limit)")
    args = ap.parse_args()
    ns = [int(n) for n in args.num_envs.split(",") if n]
    if not ns or min(ns) < 1:
        ap.error(f"--num-envs {args.num_envs!r}: comma-separated whole numbers >= 1")
    if args.base and not Path(args.base, "policy.json").is_file() and not Path(args.base).is_dir():
        ap.error(f"--base {args.base!r} is not a BasePolicy checkpoint directory (robot-rl-train-bc's <run>/policy)")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    log = (out / "gpu.jsonl").open("a")

    def record(row: dict) -> None:
        row = {"elapsed_s": round(time.perf_counter() - start, 1), **row}
        log.write(json.dumps(row) + "\n")
        log.flush()
        print(json.dumps(row), flush=True)

    # A fresh persistent compile cache: every jit below is cold (the host-API figure then reuses it).
    cache = Path(tempfile.mkdtemp(prefix="jax_cache_"))
    from robot_rl.common import jax_cache

    jax_cache.default_cache_dir = lambda: cache
    facts = device_facts(args.device)
    record({"facts": facts})
    summary = {"task": args.task, "device": args.device, **facts, "env_steps_per_s": {}, "raw_steps_per_s": {},
               "host_env_steps_per_s": {}, "step_jit_s": {}, "raw_jit_s": {}, "reset_jit_s": {}, "skipped": []}
    for n in ns:
        if time.perf_counter() - start > args.deadline_s:
            summary["skipped"].append(f"N={n}")
            continue
        try:
            r = bench_mjx(args.task, n, args.seconds, device=args.device)
            r.update(bench_host_api(args.task, n, args.seconds, args.device))
        except Exception as e:  # noqa: BLE001  (an N that fails, e.g. out of memory, is a figure too)
            record({"num_envs": n, "error": f"{type(e).__name__}: {e}"[:2000]})
            summary["skipped"].append(f"N={n}: {type(e).__name__}")
            continue
        record({"num_envs": n, **{k: round(v, 3) for k, v in r.items()}})
        for k in ("env_steps_per_s", "raw_steps_per_s", "host_env_steps_per_s"):
            summary[k][str(n)] = round(r[k])
        for k in ("step_jit_s", "raw_jit_s", "reset_jit_s"):
            summary[k][str(n)] = round(r[k], 1)
    if args.base:
        budget, kill_after = args.residual_seconds, None
        if args.hard_limit_s:  # the run's compile and evaluations take ~150 s besides its training budget
            left = args.hard_limit_s - (time.perf_counter() - start)
            budget, kill_after = min(budget, left - 150.0), left
        if budget < 10.0:
            summary["skipped"].append("residual")
        else:
            r = residual_run(args.task, args.base, args.device, budget, args.residual_envs, out, kill_after)
            record(r)
            summary.update(r)
    summary["total_s"] = round(time.perf_counter() - start, 1)
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
