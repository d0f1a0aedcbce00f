"""robot-rl-deploy: run the control node between a policy and a ROS 2 robot (or robot-rl-sim-driver).

    robot-rl-deploy policy=runs/train_bc/<run>/checkpoint episodes=20 record.store=data/deploy.zarr
    robot-rl-deploy policy=<base checkpoint> residual=runs/train_residual/<run>/policy
        a trained residual: the base's chunks from the worker, the residual in the control loop on the freshest
        observation (the default way; policy=<residual run>/policy runs both in the worker, one request per step:
        docs/results/deploy_residual.md)
    robot-rl-deploy deploy=ros2 policy=...        (on a ROS 2 host; `ros2 launch robot_rl_ros deploy.launch.py`)

Everything is validated before the policy is loaded: a bad value exits with code 2 and one message.
Writes runs/deploy/<timestamp>-<name>/{config.yaml, metrics.json} (tick lateness, missed ticks,
observation-to-command latency, safety counters, episodes) and reset_token (mode 0600: what a reset message must
carry, real/reset_token.py; also printed at start-up). SIGINT / SIGTERM stop the loop cleanly (the episode being
recorded is committed as partial); SIGUSR1 is the operator's local reset of a latched stop. A control-loop failure
sends the safe stop and a `stopped` status, then exits with code 1 and one line (traceback in <run dir>/error.txt).
"""

from __future__ import annotations

import json
import os
import re
import signal
import sys
import traceback

from omegaconf import DictConfig, OmegaConf

from robot_rl.real.cli import model_env, single_env_and_deploy_config
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

    from robot_rl.policies.base import SpecMismatch
    from robot_rl.real.inference import InferenceWorker, PolicyLoadError
    from robot_rl.real.node import ControlNode, NodeFault, bag_topics
    from robot_rl.real.recording import DeploymentRecorder, RecordingError
    from robot_rl.real.reset_token import new_token, write_token
    from robot_rl.real.residual import load_residual
    from robot_rl.real.transport import make_transport

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
    token = new_token()
    token_file = write_token(run_dir, token)
    try:
        transport = make_transport(dcfg.transport, name=dcfg.node_name, domain_id=dcfg.domain_id, loopback=dcfg.loopback,
                                   realtime_priority=dcfg.realtime_priority, security=dcfg.dds_security.files())
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
                    store=cfg.record.store, bag=cfg.record.rosbag, bag_topics=bag_topics(dcfg), task=env_cfg.task_name,
                    instruction=dcfg.instruction or env.instructions()[0], obs_dims=dims, action_dim=worker.spec.action_dim,
                    policy_name=cfg.policy, fsync=cfg.record.fsync,
                )
            except RecordingError as e:
                fail(str(e))
            closers.insert(0, recorder.close)
        try:
            node = ControlNode(dcfg, env, worker, transport, residual=residual, residual_scale=float(cfg.residual_scale),
                               recorder=recorder, policy_name=cfg.policy, max_episodes=cfg.episodes,
                               duration_s=cfg.duration_s, reset_token=token)
        except (SpecMismatch, ValueError) as e:
            fail(str(e))

        def stop(signum, frame):
            node.stopping = True

        signal.signal(signal.SIGTERM, stop)
        signal.signal(signal.SIGINT, stop)
        signal.signal(signal.SIGUSR1, lambda signum, frame: node.request_local_reset())
        if residual is None and worker.spec.action_horizon == 1 and _checkpoint_kind(cfg.policy) == "residual":
            print("robot-rl-deploy: note: policy= is a residual checkpoint, run in the worker one request per step; "
                  "policy=<its base> residual=<this checkpoint> runs the residual in the loop (half the per-step "
                  "latency, docs/results/deploy_residual.md)", flush=True)
        print(f"robot-rl-deploy: {cfg.policy} on {env_cfg.task_name}, {dcfg.rate_hz:g} Hz, {dcfg.transport} "
              f"(domain {dcfg.domain_id}{', loopback' if dcfg.transport == 'dds' and dcfg.loopback else ''}), "
              f"commands -> {dcfg.command_topic}", flush=True)
        print(f"robot-rl-deploy: reset token {token} (in {token_file}); a latched stop clears with it on "
              f"{dcfg.topics.reset} (std_msgs/String), or here: kill -USR1 {os.getpid()}", flush=True)
        try:
            metrics = node.run()
        except NodeFault as e:
            (run_dir / "error.txt").write_text(traceback.format_exc())
            metrics = node.metrics()
            metrics["error"] = str(e)
            write_metrics(run_dir, metrics)
            print(f"robot-rl-deploy: error: {e}; traceback in {run_dir / 'error.txt'}", file=sys.stderr, flush=True)
            raise SystemExit(1)
    finally:
        for close in closers:
            close()
    metrics.update({"policy": cfg.policy, "residual": res if isinstance(res, str) else None, "task": env_cfg.task_name, "rate_hz": dcfg.rate_hz,
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
    """Entry point of the ament package (ros2 run/launch robot_rl_ros robot_rl_deploy): Hydra gets the command line
    without its ROS arguments (the rclpy transport reads those from sys.orig_argv)."""
    from robot_rl.real.transport_rclpy import split_ros_args

    sys.argv = hydra_argv(split_ros_args(sys.argv)[0])
    main()


# `key:=value` (what the launch file passes for each launch argument): one override whose value is taken verbatim;
# Hydra would split it at a comma, strip its spaces or read quotes, brackets and ${...} in it, so it is quoted
_ASSIGN = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*):=(.*)$", re.DOTALL)
_PLAIN_VALUE = re.compile(r"^[A-Za-z0-9_./:@+%*?|-]*$")  # Hydra reads these unquoted as the same text (or number)
_OVERRIDES = "--overrides="  # the launch file's `overrides` argument: Hydra overrides separated by spaces


def hydra_value(value: str) -> str:
    """`value` as Hydra override syntax that Hydra reads back as exactly `value` (numbers stay numbers)."""
    if _PLAIN_VALUE.match(value):
        return value
    from hydra.core.override_parser.types import Quote, QuotedString

    return QuotedString(text=value.replace("${", "\\${"), quote=Quote.single).with_quotes()


def split_overrides(text: str) -> list[str]:
    """Hydra overrides separated by whitespace outside quotes and brackets, each kept verbatim."""
    out, cur, quote, depth, i = [], "", None, 0, 0
    while i < len(text):
        c = text[i]
        if quote:
            if c == "\\" and i + 1 < len(text):
                cur += text[i:i + 2]
                i += 2
                continue
            quote = None if c == quote else quote
        elif c in "'\"":
            quote = c
        elif c in "[{(":
            depth += 1
        elif c in "]})":
            depth -= 1
        elif c.isspace() and depth <= 0:
            if cur:
                out.append(cur)
            cur, i = "", i + 1
            continue
        cur += c
        i += 1
    if quote:
        fail(f"overrides: unterminated {quote} quote in {text!r}")
    return out + [cur] if cur else out


def hydra_argv(argv: list[str]) -> list[str]:
    """argv as the launch file passes it, as Hydra reads it: `key:=value` (any text) becomes one override,
    `--overrides=TEXT` several; anything else is already a Hydra override (`ros2 run ... key=value`)."""
    out = argv[:1]
    for arg in argv[1:]:
        m = _ASSIGN.match(arg)
        if m:
            out.append(f"{m.group(1)}={hydra_value(m.group(2))}")
        elif arg.startswith(_OVERRIDES):
            out += split_overrides(arg[len(_OVERRIDES):])
        else:
            out.append(arg)
    return out


if __name__ == "__main__":
    main()
