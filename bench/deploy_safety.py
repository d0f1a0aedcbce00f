"""Deploy-node safety figures (issue 25) over loopback DDS; one JSON line per figure, the summary last.

    python bench/deploy_safety.py [--quick]

  estop_pulses       back-to-back press/release pairs at random phases of the 100 Hz tick, each reset with the run's
                     token once it latched (the sim driver and the node in threads, tests/test_real_node.py's rig).
                     Baseline in the same run: the node's e-stop reader as at the branch point (keep-last 1,
                     volatile: the last value read in the tick).
  press_before_start the e-stop pressed (transient-local) before robot-rl-deploy starts, robot-rl-sim-driver running:
                     commands the node sent (its metrics.json) and commands seen on the wire, per trial (processes).
  fuzz               malformed messages, random and mutated, on every subscribed topic one at a time (joint states,
                     teleop, object pose, episode events, reset, a camera), then random e-stop values: node exits,
                     messages the node took, and rejections counted (every one must be).
  limits             tests/test_real_node_safety.py's random policy (100 Hz policy steps, chunks landing before,
                     during and after their step) until >= N commands; real/command_audit.py on every command
                     received: joint, workspace and velocity violations over wall-clock time, by receipt time
                     (25 ms jitter allowance) and by DDS source timestamp (0.5 ms). Baseline in the same run: the
                     filter limiting each command against the previous one by one tick's step (the branch point).

The machine is shared (2 cores): timing-sensitive figures carry the load average they were measured at.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the tests' rig and scenarios, run here at the issue's counts
os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("OMP_NUM_THREADS", "1")


def emit(d: dict) -> None:
    print(json.dumps({**d, "load_avg_1m": round(os.getloadavg()[0], 2)}), flush=True)


class Rigs:
    """tests/test_real_node.py's rig factory outside pytest: every rig closed on exit."""

    def __init__(self, tmp: Path):
        self.tmp, self.rigs = tmp, []

    def __call__(self, **kw):
        from tests.test_real_node import Rig

        self.rigs.append(Rig(self.tmp, **kw))
        return self.rigs[-1]

    def close(self) -> None:
        for r in self.rigs:
            r.close()
        self.rigs.clear()


def estop_pulses(tmp: Path, n: int, baseline_n: int) -> dict:
    import numpy as np

    from robot_rl.real import node_io
    from robot_rl.real.qos import ESTOP_READER, LATEST
    from tests.test_real_node import running
    from tests.test_real_node_safety import estop_pulses as pulses

    out = {}
    for name, count, qos in (("baseline", baseline_n, LATEST), ("node", n, ESTOP_READER)):
        node_io.ESTOP_READER = qos
        rigs = Rigs(tmp)
        try:
            rig = rigs()
            rig.wait_for(running, what="the node to run an episode")
            t0 = time.monotonic()
            latched = pulses(rig, count, np.random.default_rng(0))
            out[name] = {"pulses": count, "latched": latched, "seconds": round(time.monotonic() - t0, 1)}
        finally:
            rigs.close()
            node_io.ESTOP_READER = ESTOP_READER
    return out


def press_before_start(tmp: Path, trials: int) -> list[dict]:
    """robot-rl-sim-driver and robot-rl-deploy as processes; the bench holds the pressed e-stop and watches commands."""
    from robot_rl.real import messages as M
    from robot_rl.real.qos import ESTOP, QosProfile
    from robot_rl.real.transport_dds import DdsTransport

    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    rows = []
    for k in range(trials):
        domain = random.Random(os.getpid() ^ time.time_ns()).randint(100, 230)
        ns = f"/pbs{os.getpid()}x{k}"
        common = [f"deploy.domain_id={domain}", *(f"deploy.topics.{t}={ns}/{t}" for t in
                                                  ("joint_states", "position_commands", "trajectory_commands", "estop",
                                                   "reset", "teleop", "object_pose", "episode", "status"))]
        op = DdsTransport(domain, loopback=True)
        estop = op.publisher(f"{ns}/estop", M.Bool, ESTOP)
        estop.publish(M.Bool(data=True))  # pressed before anything starts; the publisher stays up
        cmds = op.subscribe(f"{ns}/position_commands", M.Float64MultiArray, QosProfile(reliable=True, depth=100_000))
        run = tmp / f"pbs{k}"
        driver = subprocess.Popen([sys.executable, "-m", "robot_rl.real.cli.sim_driver", "episodes=1000", "wait_for_node_s=300",
                                   f"hydra.run.dir={run / 'driver'}", *common], cwd=ROOT, env=env,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
        try:
            node = subprocess.run([sys.executable, "-m", "robot_rl.real.cli.deploy", "policy=expert", "duration_s=3",
                                   f"hydra.run.dir={run / 'node'}", *common], cwd=ROOT, env=env, capture_output=True,
                                  text=True, timeout=300)
        finally:
            driver.terminate()
            driver.wait(timeout=30)
        seen = len(cmds.take())
        op.close()
        if node.returncode != 0:
            raise SystemExit(f"robot-rl-deploy failed:\n{node.stdout}\n{node.stderr}")
        m = json.loads((run / "node" / "metrics.json").read_text())
        rows.append({"trial": k, "commands_sent": m["counts"].get("commands", 0), "commands_on_wire": seen,
                     "stop_reason": m["stop_reason"], "joint_states_received": m["received"].get("joint_states", 0),
                     "ticks": m["ticks"]})
    return rows


def fuzz(tmp: Path, n: int) -> dict:
    import uuid

    import numpy as np

    from robot_rl.real import messages as M
    from tests.test_real_node import running
    from tests.test_real_node_safety import fuzz as fuzz_topics
    from tests.test_real_node_safety import wait_until

    rigs = Rigs(tmp)
    try:
        cam = "/c" + uuid.uuid4().hex[:8] + "/front/image_raw"
        rig = rigs(extra=(f"+deploy.topics.cameras.front={cam}",))
        rig.wait_for(running, what="the node to run an episode")
        t0 = time.monotonic()
        figures = fuzz_topics(rig, cam, n, np.random.default_rng(2))
        rng = np.random.default_rng(3)
        values = rng.random(n) < 0.5  # e-stop: every Bool is well-formed; every one must be read
        before, presses = rig.node.io.received["estop"], rig.node.safety.counts["estop_presses"]
        for i, v in enumerate(values):
            rig.estop.publish(M.Bool(data=bool(v)))
            wait_until(rig, lambda: rig.node.io.received["estop"] > before + i, 2.0, f"e-stop message {i}")
        figures["estop"] = (n, rig.node.io.received["estop"] - before,
                            rig.node.safety.counts["estop_presses"] - presses)  # (sent, received, presses counted)
        s = rig.wait_for(lambda s: s["mode"] == "stopped", what="a status after the fuzz")
        alive = rig.threads[1].is_alive() and not rig.errors
        return {"per_topic": {k: {"sent": a, "received": b, "counted": c} for k, (a, b, c) in figures.items()},
                "estop_true_sent": int(values.sum()), "node_exits": 0 if alive else 1,
                "status_after": {"mode": s["mode"], "stop_reason": s["stop_reason"]},
                "rejection_kinds": sorted(k for k in rig.node.safety.counts if k.startswith("rejected_")),
                "seconds": round(time.monotonic() - t0, 1)}
    finally:
        rigs.close()


def limits(tmp: Path, commands: int, baseline_commands: int) -> dict:
    from robot_rl.real.safety import SafetyFilter
    from tests.test_real_node_safety import RandomPolicy, observe_random_policy

    def per_message(self, candidate, measured, now, _filter=SafetyFilter.filter):
        return _filter(self, candidate, measured, self.sent_t + self.max_dt / 1.5)  # one tick's step, any time

    out = {}
    for name, n in (("baseline", baseline_commands), ("node", commands)):
        rigs = Rigs(tmp)
        original = SafetyFilter.filter
        if name == "baseline":
            SafetyFilter.filter = per_message
        try:
            RandomPolicy.seed = 11 if name == "node" else 12
            t0 = time.monotonic()
            _, r = observe_random_policy(rigs, actions=n, commands=n)
            r["seconds"] = round(time.monotonic() - t0, 1)
            out[name] = r
        finally:
            SafetyFilter.filter = original
            rigs.close()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="small counts (a minute) instead of the issue's")
    args = ap.parse_args()
    q = args.quick
    with tempfile.TemporaryDirectory(prefix="bench_deploy_safety_") as d:
        tmp = Path(d)
        pulses = estop_pulses(tmp, 50 if q else 1000, 10 if q else 30)
        emit({"figure": "estop_pulses", **pulses})
        pbs = press_before_start(tmp, 1 if q else 5)
        emit({"figure": "press_before_start", "trials": pbs})
        fz = fuzz(tmp, 50 if q else 1000)
        emit({"figure": "fuzz", **fz})
        lim = limits(tmp, 1000 if q else 10_000, 500 if q else 2000)
        emit({"figure": "limits", **lim})
    node = lim["node"]
    summary = {
        "estop_pulses": pulses["node"]["pulses"], "estop_latched": pulses["node"]["latched"],
        "estop_latched_baseline": f"{pulses['baseline']['latched']}/{pulses['baseline']['pulses']}",
        "press_before_start_commands_sent": sum(r["commands_sent"] for r in pbs),
        "press_before_start_commands_on_wire": sum(r["commands_on_wire"] for r in pbs), "press_before_start_trials": len(pbs),
        "fuzz_messages": sum(v["sent"] for v in fz["per_topic"].values()), "fuzz_node_exits": fz["node_exits"],
        "fuzz_all_counted": all(v["sent"] == v["counted"] for k, v in fz["per_topic"].items() if k != "estop")
        and fz["per_topic"]["estop"]["received"] == fz["per_topic"]["estop"]["sent"]
        and fz["per_topic"]["estop"]["counted"] == fz["estop_true_sent"],
        "limits_commands": node["commands"], "limits_late_updates": node["late_updates"],
        "limits_violations": node["joint_violations"] + node["workspace_violations"] + node["velocity_violations"]
        + node["source_timestamps"]["velocity_violations"],
        "limits_receipt_excess_ms": round(node["excess_ms"], 3),
        "limits_source_excess_ms": round(node["source_timestamps"]["excess_ms"], 3),
        "limits_baseline_velocity_violations": lim["baseline"]["velocity_violations"],
        "limits_baseline_source_excess_ms": round(lim["baseline"]["source_timestamps"]["excess_ms"], 3),
        "cores": os.cpu_count(), "quick": q,
    }
    emit(summary)


if __name__ == "__main__":
    main()
