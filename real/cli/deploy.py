"""robot-rl-deploy: run the control node between a policy and a ROS 2 robot (or robot-rl-sim-driver).

    robot-rl-deploy policy=runs/train_bc/<run>/checkpoint episodes=20 record.store=data/deploy.zarr
    robot-rl-deploy policy=<base checkpoint> residual=runs/train_residual/<run>/policy
        a trained residual: the base's chunks from the worker, the residual in the control loop on the freshest
        observation (the default way; policy=<residual run>/policy runs both in the worker, one request per step:
        docs/results/deploy_residual.md)
    robot-rl-deploy deploy=ros2 policy=...        (on a ROS 2 host; `ros2 launch robot_rl deploy.launch.py`)

Everything is validated before the policy is loaded: a bad value exits with code 2 and one message.
Writes runs/deploy/<timestamp>-<name>/{config.yaml, metrics.json} (tick lateness, missed ticks,
observation-to-command latency, safety counters, episodes). SIGINT / SIGTERM stop the loop cleanly
(the episode being recorded is committed as partial).
"""

from __future__ import annotations

import json
import signal
import sys

from omegaconf import DictConfig, OmegaConf

from real.cli import model_env, single_env_and_deploy_config
from robot_rl.common.cli import fail, hydra_command, number, whole
from robot_rl.common.run_dir import current_run_dir, write_config, write_metrics


def check_command_config(cfg: DictConfig):
    """(EnvConfig, DeployConfig) of a robot-rl-deploy config, or fail() naming the bad value."""

    env_cfg, dcfg = single_env_and_deploy_config(cfg, "the deployment node uses the MuJoCo C model")
    if not (isinstance(cfg.policy, str) and cfg.policy):
        fail(f"policy={cfg.policy!r} must be 'expert', a checkpoint directory or 'module:function'")
    number("expert_noise", cfg.expert_noise)
    whole("seed", cfg.seed)
    res = cfg.residual
    if not (res is None or (isinstance(res, str) and res) or (isinstance(res, DictConfig) and "_target_" in res)):
        fail(f"residual={res!r} must be null, a residual checkpoint directory or {{_target_: module.Class, ...}}")
    scale = number("residual_scale", cfg.residual_scale)
    if scale > 1:
        fail(f"residual_scale={scale} must be in [0, 1]")
    if cfg.episodes is not None:
        whole("episodes", cfg.episodes, 1)
    if cfg.duration_s is not None:
        number("duration_s", cfg.duration_s, 0.0, strict=True)
    for k in ("store", "rosbag"):
        v = cfg.record[k]
        if v is not None and not (isinstance(v, str) and v):
            fail(f"record.{k}={v!r} must be a path or null")
    if not isinstance(cfg.record.fsync, bool):
        fail(f"record.fsync={cfg.record.fsync!r} must be true or false")
    return env_cfg, dcfg


def run(cfg: DictConfig) -> dict:
    import dataclasses
    from pathlib import Path

    from policies.base import SpecMismatch
    from real.inference import InferenceWorker, PolicyLoadError
    from real.node import ControlNode, bag_topics
    from real.recording import DeploymentRecorder, RecordingError
    from real.residual import load_residual
    from real.transport import make_transport

    env_cfg, dcfg = check_command_config(cfg)
    if cfg.record.rosbag is not None and Path(cfg.record.rosbag).exists():
        fail(f"record.rosbag={cfg.record.rosbag!r} already exists; give a new directory")
    env = model_env(env_cfg, dcfg)
    try:
        res = cfg.residual
        residual = load_residual(OmegaConf.to_container(res, resolve=True) if isinstance(res, DictConfig) else res)
    except Exception as e:  # noqa: BLE001 - import errors, bad kwargs: one line naming the residual
        fail(f"residual: {e}")
    run_dir = current_run_dir()
    write_config(run_dir, cfg)
    try:
        transport = make_transport(dcfg.transport, name=dcfg.node_name, domain_id=dcfg.domain_id, loopback=dcfg.loopback,
                                   realtime_priority=dcfg.realtime_priority)
    except (RuntimeError, ValueError) as e:
        fail(str(e))
    closers = [transport.close, env.close]
    try:
        try:
            worker = InferenceWorker(
                cfg.policy, dataclasses.asdict(env_cfg), mode=dcfg.inference.worker, expert_noise=float(cfg.expert_noise),
                seed=int(cfg.seed), torch_threads=dcfg.inference.torch_threads, nice=dcfg.inference.nice,
                realtime_priority=dcfg.inference.realtime_priority,
            )
        except PolicyLoadError as e:
            fail(str(e))
        closers.insert(0, worker.close)
        recorder = None
        if cfg.record.store is not None or cfg.record.rosbag is not None:
            dims = {k: (v,) for k, v in worker.spec.obs_dims.items()}
            try:
                recorder = DeploymentRecorder(
                    store=cfg.record.store, bag=cfg.record.rosbag, bag_topics=bag_topics(dcfg), task=env_cfg.task,
                    instruction=dcfg.instruction or env.instructions()[0], obs_dims=dims, action_dim=worker.spec.action_dim,
                    policy_name=cfg.policy, fsync=cfg.record.fsync,
                )
            except RecordingError as e:
                fail(str(e))
            closers.insert(0, recorder.close)
        try:
            node = ControlNode(dcfg, env, worker, transport, residual=residual, residual_scale=float(cfg.residual_scale),
                               recorder=recorder, policy_name=cfg.policy, max_episodes=cfg.episodes,
                               duration_s=cfg.duration_s)
        except (SpecMismatch, ValueError) as e:
            fail(str(e))

        def stop(signum, frame):
            node.stopping = True

        signal.signal(signal.SIGTERM, stop)
        signal.signal(signal.SIGINT, stop)
        if residual is None and worker.spec.action_horizon == 1 and _checkpoint_kind(cfg.policy) == "residual":
            print("robot-rl-deploy: note: policy= is a residual checkpoint, run in the worker one request per step; "
                  "policy=<its base> residual=<this checkpoint> runs the residual in the loop (half the per-step "
                  "latency, docs/results/deploy_residual.md)", flush=True)
        print(f"robot-rl-deploy: {cfg.policy} on {env_cfg.task}, {dcfg.rate_hz:g} Hz, {dcfg.transport} "
              f"(domain {dcfg.domain_id}{', loopback' if dcfg.transport == 'dds' and dcfg.loopback else ''}), "
              f"commands -> {dcfg.command_topic}", flush=True)
        metrics = node.run()
    finally:
        for close in closers:
            close()
    metrics.update({"policy": cfg.policy, "residual": res if isinstance(res, str) else None, "task": env_cfg.task, "rate_hz": dcfg.rate_hz,
                    "recorded_episodes": recorder.committed if recorder is not None else 0,
                    "bag_messages": recorder.messages if recorder is not None else 0,
                    "recording_error": recorder.error if recorder is not None else None})
    write_metrics(run_dir, metrics)
    import numpy as np

    np.savez(run_dir / "timing.npz", lateness_s=np.asarray(node.clock.lateness), obs_to_cmd_s=np.asarray(node.obs_to_cmd),
             recv_to_cmd_s=np.asarray(node.recv_to_cmd), chunk_latency_s=np.asarray(node.chunk_latency))
    print(json.dumps({k: metrics[k] for k in ("episodes", "successes", "p99_lateness_ms", "missed_ticks",
                                              "obs_to_cmd_p99_ms", "stop_reason")}), flush=True)
    print(f"run dir: {run_dir}", flush=True)
    return metrics


def _checkpoint_kind(path: str) -> str | None:
    """The `kind` a checkpoint directory's config.json names (None when it is not one)."""
    from pathlib import Path

    from robot_rl.common.checkpoint import CONFIG

    try:
        return json.loads((Path(path) / CONFIG).read_text()).get("kind")
    except (OSError, ValueError, AttributeError):
        return None


@hydra_command("deploy")
def main(cfg: DictConfig) -> None:
    run(cfg)


def ros_main() -> None:
    """Entry point of the ament package (ros2 run/launch robot_rl robot_rl_deploy): strips --ros-args for Hydra."""
    import rclpy
    from rclpy.utilities import remove_ros_args

    rclpy.init(args=sys.argv)
    sys.argv = hydra_argv(remove_ros_args(sys.argv))
    main()


def hydra_argv(argv: list[str]) -> list[str]:
    """argv as the launch file passes it: each element may hold several space-separated overrides, or none."""
    return argv[:1] + [tok for arg in argv[1:] for tok in arg.split()]


if __name__ == "__main__":
    main()
