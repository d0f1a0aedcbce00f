"""robot-rl-sim-driver: a MuJoCo robot that behaves like a ros2_control robot over DDS (real/sim_driver.py).

    robot-rl-sim-driver task=lift episodes=20 seed=0            # then robot-rl-deploy in another shell

Writes runs/sim_driver/<timestamp>-<name>/{config.yaml, metrics.json} with per-episode success, comparable
episode by episode with `robot-rl-eval` / in-process evaluation on the same seed (env 0, num_envs=1).
"""

from __future__ import annotations

import json
import signal

from omegaconf import DictConfig

from robot_rl.real.cli import model_env, single_env_and_deploy_config
from robot_rl.common.cli import fail, hydra_command, number, whole
from robot_rl.common.run_dir import current_run_dir, write_config, write_metrics


def driver_noise(cfg: DictConfig, env_cfg) -> dict[str, float]:
    """noise.{position_std, velocity_std, object_std} of the driver's config, a null one as the randomization's
    obs_noise_std."""
    return {k: env_cfg.randomization.obs_noise_std if cfg.noise[k] is None else number(f"noise.{k}", cfg.noise[k])
            for k in ("position_std", "velocity_std", "object_std")}


@hydra_command("sim_driver")
def main(cfg: DictConfig) -> None:
    from robot_rl.real.sim_driver import NodeTimeout, SimDriver
    from robot_rl.real.transport import make_transport

    env_cfg, dcfg = single_env_and_deploy_config(cfg, "the sim driver steps MuJoCo C in real time")
    whole("episodes", cfg.episodes, 1)
    whole("seed", cfg.seed)
    rate = number("rate_hz", cfg.rate_hz, 0.0, strict=True)
    if not (isinstance(cfg.realtime_priority, int) and 0 <= cfg.realtime_priority <= 99):
        fail(f"realtime_priority={cfg.realtime_priority!r} must be a whole number in [0, 99] (0: off)")
    for k in ("command_latency_s", "state_latency_s", "wait_for_node_s"):
        number(k, cfg[k])
    noise = driver_noise(cfg, env_cfg)
    if dcfg.transport != "dds":
        fail(f"deploy.transport={dcfg.transport!r}: the sim driver speaks DDS only; use a deploy profile with transport: dds")
    env = model_env(env_cfg, dcfg)
    run_dir = current_run_dir()
    write_config(run_dir, cfg)
    transport = make_transport("dds", name="robot_rl_sim_driver", domain_id=dcfg.domain_id, loopback=dcfg.loopback,
                               realtime_priority=int(cfg.realtime_priority))
    try:
        try:
            driver = SimDriver(
                env, dcfg, transport, rate_hz=rate, seed=int(cfg.seed), episodes=int(cfg.episodes),
                command_latency_s=float(cfg.command_latency_s), state_latency_s=float(cfg.state_latency_s),
                position_noise_std=float(noise["position_std"]), velocity_noise_std=float(noise["velocity_std"]),
                object_noise_std=float(noise["object_std"]), wait_for_node_s=float(cfg.wait_for_node_s),
                realtime_priority=int(cfg.realtime_priority),
            )
        except ValueError as e:
            fail(str(e))

        def stop(signum, frame):
            driver.stopping = True

        signal.signal(signal.SIGTERM, stop)
        signal.signal(signal.SIGINT, stop)
        print(f"robot-rl-sim-driver: {env_cfg.task_name}, {cfg.episodes} episodes from seed {cfg.seed}, {rate:g} Hz, "
              f"DDS domain {dcfg.domain_id}{' (loopback)' if dcfg.loopback else ''}", flush=True)
        try:
            metrics = driver.run()
        except NodeTimeout as e:
            metrics = driver.metrics()
            metrics["error"] = str(e)
            write_metrics(run_dir, metrics)
            print(f"robot-rl-sim-driver: error: {e}", flush=True)
            raise SystemExit(1)
    finally:
        transport.close()
        env.close()
    metrics["task"] = env_cfg.task_name
    write_metrics(run_dir, metrics)
    print(json.dumps({k: metrics[k] for k in ("episodes", "successes", "success_rate")}), flush=True)
    print(f"run dir: {run_dir}", flush=True)


if __name__ == "__main__":
    main()
