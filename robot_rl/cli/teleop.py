"""robot-rl-teleop: drive the sim robot to record demos, or supervise a policy and take over when it errs.

    robot-rl-teleop task=lift out=data/lift-teleop.zarr device=keyboard            # teleop demos
    robot-rl-teleop task=lift policy=runs/train_bc/<run>/policy out=data/lift-hil.zarr device=spacemouse
    robot-rl-teleop task=lift policy=<ckpt> out=data/lift-hil.zarr device=scripted episodes=50   # headless

Devices: keyboard | spacemouse | gamepad | scripted (the scripted human of robot_rl/hil/scripted.py,
settings in configs/hil/scripted.yaml). With a display, MuJoCo's viewer shows the robot (and takes the
keyboard); without one, a frame is rendered every `frame_every` steps to <run dir>/frames/ (latest.png is
the newest). Episodes land in the episode store `out` with per-step intervention masks and source =
teleop | intervention | policy (see robot_rl/hil/session.py). Writes runs/teleop/<timestamp>-<name>/
{config.yaml, metrics.json, frames/}.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from robot_rl.common.config import from_mapping
from robot_rl.common.atomic import vacant
from robot_rl.common.cli import fail, hydra_command, whole
from robot_rl.cli.common import env_config, make_env, set_torch_threads
from robot_rl.common.run_dir import current_run_dir, write_config, write_metrics

TRI = ("auto", True, False)


def _check_config(cfg: DictConfig):
    from robot_rl.hil import DEVICES

    env_cfg = env_config(cfg.env)
    if cfg.device not in DEVICES:
        fail(f"device={cfg.device!r}; valid: {', '.join(DEVICES)}")
    if env_cfg.num_envs != 1:
        fail(f"env.num_envs={env_cfg.num_envs}: the teleop tool drives one env; set env.num_envs=1")
    whole("episodes", cfg.episodes, 1)
    whole("seed", cfg.seed, 0)
    whole("frame_every", cfg.frame_every, 0)
    whole("rewind_steps", cfg.rewind_steps, 0)
    whole("torch_threads", cfg.torch_threads, 0)
    for k in ("viewer", "realtime"):
        if cfg[k] not in TRI:
            fail(f"{k}={cfg[k]!r}; valid: auto, true, false")
    if not (isinstance(cfg.out, str) and cfg.out):
        fail("out=PATH (the episode store to record into) is required")
    if cfg.policy is not None and not (isinstance(cfg.policy, str) and cfg.policy):
        fail(f"policy={cfg.policy!r} must be a checkpoint directory (or null to drive the robot yourself)")
    if cfg.rewind_steps and env_cfg.backend != "mujoco":
        fail("rewind needs backend=mujoco; set backend=mujoco or rewind_steps=0")
    return env_cfg


def _scripted_config(cfg: DictConfig, supervising: bool):
    from robot_rl.hil import ScriptedHumanConfig

    node = OmegaConf.to_container(cfg.hil, resolve=True) if cfg.get("hil") is not None else {}
    try:
        sc = from_mapping(ScriptedHumanConfig, node, "hil")
    except (TypeError, ValueError) as e:
        fail(str(e))
    if not supervising:
        sc.trigger = "always"  # no policy to drift from: the scripted human drives every step
        sc.max_fraction = 1.0
    return sc


def _load_policy(path: str, env, device: str):
    from robot_rl.policies import SpecMismatch, load_policy
    from robot_rl.policies.runner import PolicyRunner
    from robot_rl.common.checkpoint import CheckpointError

    try:
        pol = load_policy(path, device=device)
        pol.spec.check_env(env)
    except (CheckpointError, SpecMismatch) as e:
        fail(str(e))
    except RuntimeError as e:
        fail(f"cannot load {path} on device {device!r}: {str(e).splitlines()[0]}")
    return PolicyRunner(pol, env.num_envs, env=env)


def _has_display() -> bool:
    return bool(os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")) or sys.platform == "darwin"


@hydra_command("teleop")
def main(cfg: DictConfig) -> None:
    from robot_rl.data.episode_store import EpisodeStore, check_is_store
    from robot_rl.data.errors import StoreError

    t0 = time.perf_counter()
    env_cfg = _check_config(cfg)
    set_torch_threads(int(cfg.torch_threads))
    run_dir = current_run_dir()
    out = Path(cfg.out)
    if not vacant(out):
        try:
            check_is_store(out)  # refuse a non-store path before any env or device is opened
        except StoreError as e:
            fail(str(e))
    supervising = cfg.policy is not None
    scripted = cfg.device == "scripted"
    sc = _scripted_config(cfg, supervising) if scripted else None
    write_config(run_dir, cfg)

    from robot_rl.hil import DeviceSupervisor, DeviceUnavailable, InterventionController, ScriptedHuman, open_device
    from robot_rl.hil.rewind import Rewinder
    from robot_rl.hil.session import run_session

    env = make_env(env_cfg)
    device = viewer = None
    try:
        policy = _load_policy(cfg.policy, env, str(cfg.policy_device)) if supervising else None
        if scripted:
            try:
                supervisor = ScriptedHuman(env, sc)
            except ValueError as e:  # no expert for this task / not ee_delta
                fail(str(e))
        else:
            if env_cfg.action_space != "ee_delta":
                fail(f"device={cfg.device} drives ee_delta actions; set env.action_space=ee_delta")
            use_viewer = _has_display() if cfg.viewer == "auto" else bool(cfg.viewer)
            keys = None
            if use_viewer:
                viewer, keys = _open_viewer(env)
            try:
                device = open_device(cfg.device, OmegaConf.to_container(cfg[cfg.device], resolve=True), keys)
            except (DeviceUnavailable, ValueError, TypeError) as e:
                fail(str(e))
            supervisor = DeviceSupervisor(device, 1, env.action_dim, env.action_space.use_yaw, teleop=not supervising)
        controller = InterventionController(1, supervisor)
        rewinder = Rewinder(env, int(cfg.rewind_steps)) if cfg.rewind_steps else None
        hooks = _hooks(cfg, env, run_dir, viewer, realtime=(not scripted) if cfg.realtime == "auto" else bool(cfg.realtime))
        try:
            store = EpisodeStore.open(out, mode="a", fsync=cfg.fsync)
        except StoreError as e:
            fail(str(e))
        try:
            if not scripted:
                print(_help(cfg.device, supervising), flush=True)
            result = run_session(
                env, controller, store, int(cfg.episodes), seed=int(cfg.seed), policy=policy, rewinder=rewinder,
                rewind_steps=int(cfg.rewind_steps), hooks=hooks,
                metadata={"backend": env_cfg.backend, "device": cfg.device,
                          "policy": str(cfg.policy) if supervising else None},
            )
        except StoreError as e:  # the store holds episodes of another shape (e.g. another task)
            fail(str(e))
        finally:
            store.close()
    finally:
        if device is not None:
            device.close()
        if viewer is not None:
            viewer.close()
        env.close()
    from robot_rl.hil import summary

    metrics = {"task": env_cfg.task_name, "device": cfg.device, "policy": cfg.policy, "store": str(out), "seed": int(cfg.seed),
               **result, **summary(controller.pop_finished()), "wall_time_s": time.perf_counter() - t0}
    if sc is not None:
        metrics["scripted_human"] = {k: getattr(sc, k) for k in sc.__dataclass_fields__}
    write_metrics(run_dir, metrics)
    print(f"{env_cfg.task_name}: recorded {result['episodes']} episodes ({result['steps']} steps, "
          f"{result['intervention_fraction']:.1%} under human control), success {result['success_rate']:.3f}, "
          f"sources {result['sources']}, into {out} (now {result['store_episodes']} episodes)")
    if result["stopped"] == "device_lost":
        print(f"stopped early: device={cfg.device} was lost; every episode recorded so far is in {out}")
    print(f"run dir: {run_dir}")


def _help(device: str, supervising: bool) -> str:
    what = "supervising the policy: take over to correct it, hand back when done" if supervising else \
        "you drive the robot (every step is recorded as a teleop demo)"
    keys = {
        "keyboard": "w/s a/d r/f q/e move x/y/z/yaw, space gripper, t take over / hand back, g success, b failure, "
                    "x reset, z rewind",
        "spacemouse": "move the cap to move the hand, left button gripper, right button take over / hand back",
        "gamepad": "sticks move, A gripper, RB take over / hand back, start success, select failure, X reset, LB rewind",
    }[device]
    return f"robot-rl-teleop: {what}. {keys}. Ctrl-C stops (the episode in progress is kept)."


def _open_viewer(env):
    """MuJoCo's passive viewer on env 0 and the keyboard queue its key callback feeds."""
    import mujoco.viewer

    from robot_rl.hil.keyboard import viewer_source

    keys, callback = viewer_source()
    model, data = env._render_state(0)  # env 0's model and a scratch MjData kept in sync below
    try:
        viewer = mujoco.viewer.launch_passive(model, data, key_callback=callback)
    except Exception as e:  # no usable display / GL
        fail(f"cannot open MuJoCo's viewer ({str(e).splitlines()[0]}); run with viewer=false for headless mode")
    return viewer, keys


def _hooks(cfg, env, run_dir: Path, viewer, realtime: bool):
    from robot_rl.hil.session import SessionHooks

    frames = run_dir / "frames"
    every = int(cfg.frame_every)
    period = 1.0 / env.control_hz
    next_t = [time.perf_counter()]

    def on_step(episode: int, step: int, obs) -> None:
        if viewer is not None:
            if not viewer.is_running():
                raise KeyboardInterrupt  # the window was closed: stop like Ctrl-C, keeping the episode
            with viewer.lock():
                env._render_state(0)
            viewer.sync()
        elif every and step % every == 0:
            from PIL import Image

            frames.mkdir(parents=True, exist_ok=True)
            img = Image.fromarray(env.render([0], str(cfg.camera), *cfg.frame_size)[0])
            img.save(frames / f"episode_{episode:04d}_step_{step:04d}.png")
            tmp = frames / "latest.tmp.png"
            img.save(tmp)
            os.replace(tmp, frames / "latest.png")

    def pace() -> None:
        next_t[0] += period
        delay = next_t[0] - time.perf_counter()
        if delay > 0:
            time.sleep(delay)
        else:
            next_t[0] = time.perf_counter()  # running late: do not try to catch up

    def on_episode(ep) -> None:
        m = ep.metadata
        print(f"episode {ep.seed}: {ep.length} steps, source {ep.source}, success {ep.success}, "
              f"{m['intervention_steps']} human steps, end {m['end']}", flush=True)

    return SessionHooks(on_step=on_step, pace=pace if realtime else None, on_episode=on_episode)


if __name__ == "__main__":
    main()
