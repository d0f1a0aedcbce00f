"""Camera rendering cost on the MuJoCo C backend: frames/s, env steps/s with and without cameras, store bytes.

    python bench/render_throughput.py [--quick] [--task color_lift] [--size 96]

For each N: `render_frames_per_s` renders the cameras (front + wrist) of every env at its current state,
as a step does (no physics); `steps_per_s` is the batched env step with random actions, without cameras
(the baseline), with cameras (image_quality=fast, the default) and with image_quality=high (shadows,
reflections, 4x anti-aliasing). Figures are summed over envs. `store` gives the compressed bytes on disk
per camera frame of expert episodes collected into an episode store. Offscreen GL is whatever MUJOCO_GL
selects (egl on a headless machine; without a GPU that is Mesa's llvmpipe software rasterizer, named in
`gl_renderer`). The load average is reported because other processes on the cores slow GL down too.
Last line: JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import tempfile
import time
from pathlib import Path

import numpy as np

CAMERAS = ["front", "wrist"]


def _timed(fn, min_seconds: float, min_iters: int = 3) -> float:
    """Seconds per call of fn(), averaged over at least min_seconds."""
    fn()
    n, start = 0, time.perf_counter()
    while n < min_iters or time.perf_counter() - start < min_seconds:
        fn()
        n += 1
    return (time.perf_counter() - start) / n


def _steps_per_s(env, seconds: float) -> float:
    env.reset(0)
    actions = np.random.default_rng(0).uniform(-1, 1, (64, env.num_envs, env.action_dim)).astype(np.float32)
    i = [0]

    def step():
        env.step(actions[i[0] % 64])
        i[0] += 1

    return env.num_envs / _timed(step, seconds)


def bench_n(task: str, n: int, size: int, seconds: float) -> dict:
    from robot_rl import sim

    kw = dict(backend="mujoco", num_envs=n)
    plain = sim.make(task, **kw)
    base = _steps_per_s(plain, seconds)
    plain.close()
    env = sim.make(task, cameras=CAMERAS, image_size=[size, size], **kw)
    with_cams = _steps_per_s(env, seconds)
    envs = np.arange(n)
    render_s = _timed(lambda: env._render_images(env.models, env.qpos, env.mocap_pos, envs), seconds)
    env.close()
    high = sim.make(task, cameras=CAMERAS, image_size=[size, size], image_quality="high", **kw)
    with_high = _steps_per_s(high, seconds)
    high.close()
    return {
        "render_frames_per_s": n * len(CAMERAS) / render_s,
        "steps_per_s_no_cameras": base,
        "steps_per_s_cameras": with_cams,
        "steps_per_s_cameras_high_quality": with_high,
        "cameras_slowdown": base / with_cams,
    }


def store_bytes(task: str, size: int, episodes: int) -> dict:
    """Compressed bytes per frame of each camera in an episode store of expert episodes."""
    from robot_rl import sim
    from robot_rl.data.collect import collect
    from robot_rl.data.episode_store import EpisodeStore
    from robot_rl.sim.experts import make_expert

    env = sim.make(task, num_envs=min(episodes, 4), cameras=CAMERAS, image_size=[size, size])
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "s.zarr"
        with EpisodeStore.open(path, mode="a") as store:
            collect(env, make_expert(env), store, episodes=episodes, seed=0)
            frames = store.n_steps
        out = {}
        for cam in CAMERAS:
            d = path / "data" / "obs" / "images" / cam
            disk = sum(p.stat().st_size for p in d.rglob("*") if p.is_file() and p.name != "zarr.json")
            out[cam] = {"bytes_per_frame": disk / frames, "raw_bytes_per_frame": size * size * 3,
                        "compression": size * size * 3 * frames / disk}
    env.close()
    return {"frames": frames, **out}


def gl_renderer() -> str | None:
    """The GL_RENDERER string of an offscreen context (e.g. 'llvmpipe (LLVM 15.0.6, 256 bits)')."""
    try:
        from robot_rl import sim
        from robot_rl.sim.render import FrameRenderer

        env = sim.make("lift", num_envs=1)
        r = FrameRenderer(8, 8).context(env.model)
        r._gl_context.make_current()  # noqa: SLF001 (mujoco.Renderer keeps its context private)
        from OpenGL import GL

        name = GL.glGetString(GL.GL_RENDERER)
        return name.decode() if isinstance(name, bytes) else str(name)
    except Exception:  # informational only
        return None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="N in {1, 16}, shorter timings, 4 stored episodes")
    ap.add_argument("--task", default="color_lift")
    ap.add_argument("--size", type=int, default=96, help="image height and width, pixels")
    args = ap.parse_args()
    seconds = 1.0 if args.quick else 3.0
    ns = (1, 16) if args.quick else (1, 16, 64)
    out = {
        "task": args.task, "cameras": CAMERAS, "image_size": [args.size, args.size],
        "mujoco_gl": os.environ.get("MUJOCO_GL"), "gl_renderer": gl_renderer(),
        "cores": os.cpu_count(), "load_avg_1min": os.getloadavg()[0], "machine": platform.machine(), "cpu": {},
    }
    for n in ns:
        r = bench_n(args.task, n, args.size, seconds)
        out["cpu"][str(n)] = r
        print(f"N={n:3d}  render {r['render_frames_per_s']:7.0f} frames/s   env steps/s: no cameras "
              f"{r['steps_per_s_no_cameras']:7.0f}, cameras {r['steps_per_s_cameras']:7.0f}, cameras at high quality "
              f"{r['steps_per_s_cameras_high_quality']:7.0f}")
    out["store"] = store_bytes(args.task, args.size, 4 if args.quick else 16)
    for cam in CAMERAS:
        s = out["store"][cam]
        print(f"store {cam}: {s['bytes_per_frame']:.0f} bytes/frame on disk ({s['compression']:.1f}x)")
    print(f"load average (1 min) at start: {out['load_avg_1min']:.1f} on {out['cores']} cores")
    print(json.dumps(out))


if __name__ == "__main__":
    from robot_rl import sim  # noqa: F401  (chooses MUJOCO_GL before anything imports mujoco)

    main()
