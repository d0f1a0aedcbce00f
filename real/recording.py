"""Recording a deployment: episodes into the episode store and raw traffic into a rosbag2 (MCAP).

The writing happens in a separate (spawned) process: a zarr commit or an MCAP chunk would otherwise hold
the control loop's GIL for milliseconds. The node's side only buffers and sends over a pipe once per tick,
after the tick's command is out.

Episodes have the keys of sim-collected ones (robot_rl/data/recorder.py: obs/<key>, action, reward,
terminated, truncated, success, progress, intervention), one step per policy step: the observation the
policy saw and the action executed (the human's while intervening: intervention = true). Reward and
progress are 0 (no simulator on a robot; learned reward models fill them in later); success comes from the
episode's end event and is set on its last step. Source: "intervention" when a human took over at any
step, else "expert" for the scripted expert and "policy" otherwise. An episode cut short (a safe stop, the
node stopping) is committed with metadata partial = true and success = false.

The rosbag holds every message the node received or sent on its topics as ROS 2 CDR (the IDL bytes are
ROS 2's, real/messages.py), so `ros2 bag play` and `robot-rl-import-rosbag` read it.
"""

from __future__ import annotations

import multiprocessing as mp
import time
from pathlib import Path

import numpy as np

from robot_rl.real.messages import ros_type_name


class RecordingError(RuntimeError):
    """The store or bag cannot be written; the message names the path and the problem."""


def _writer_main(conn, store_path, bag_path, bag_topics: dict, task, instruction, obs_dims, action_dim, fsync) -> None:
    store = writer = None
    conns = {}
    committed = messages = 0
    error = None
    try:
        if store_path is not None:
            from robot_rl.data.episode_store import EpisodeStore
            from robot_rl.data.recorder import step_schema

            store = EpisodeStore.open(store_path, mode="a", fsync=fsync)
            example = {k: np.zeros((1, *shape), np.float32 if len(shape) == 1 else np.uint8) for k, shape in obs_dims.items()}
            store.check_compatible(step_schema(example, action_dim))
        if bag_path is not None:
            from rosbags.rosbag2 import StoragePlugin, Writer
            from rosbags.typesys import Stores, get_typestore

            writer = Writer(Path(bag_path), version=8, storage_plugin=StoragePlugin.MCAP)
            writer.open()
            ts = get_typestore(Stores.ROS2_HUMBLE)
            conns = {t: writer.add_connection(t, name, typestore=ts) for t, name in bag_topics.items()}
    except Exception as e:  # noqa: BLE001 - reported to the node's process, which refuses to start
        conn.send(("error", f"{type(e).__name__}: {e}"))
        if store is not None:
            store.close()
        return
    conn.send(("ready", None))
    from robot_rl.data.episode_store import Episode

    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError):
            break
        if msg[0] == "close":
            break
        try:
            if msg[0] == "bag":
                for topic, t_ns, data in msg[1]:
                    writer.write(conns[topic], t_ns, data)
                    messages += 1
            elif msg[0] == "episode":
                data, source, success, meta, seed = msg[1:]
                store.append(Episode(steps=data, task=task, source=source, success=success, instruction=instruction,
                                     seed=seed, metadata=meta))
                committed += 1
        except Exception as e:  # noqa: BLE001 - kept and reported at close; recording goes on
            error = error or f"{type(e).__name__}: {e}"
    if writer is not None:
        writer.close()
    if store is not None:
        store.close()
    try:
        conn.send(("closed", committed, messages, error))
    except (OSError, ValueError):
        pass


class DeploymentRecorder:
    """Node-side handle: episode steps and bag messages in, a writer process does the I/O."""

    def __init__(self, *, store: str | Path | None, bag: str | Path | None, bag_topics: dict[str, type], task: str,
                 instruction: str, obs_dims: dict[str, tuple], action_dim: int, policy_name: str, fsync: bool = False):
        if bag is not None and Path(bag).exists():
            raise RecordingError(f"rosbag {bag} already exists; record into a new directory")
        self.policy_name = policy_name
        self.recording_bag = bag is not None
        self.recording_episodes = store is not None
        parent, child = mp.Pipe()
        self._conn = parent
        args = (child, None if store is None else str(store), None if bag is None else str(bag),
                {t: ros_type_name(c) for t, c in bag_topics.items()}, task, instruction, obs_dims, action_dim, fsync)
        self._proc = mp.get_context("spawn").Process(target=_writer_main, args=args, name="robot-rl-recorder", daemon=True)
        self._proc.start()
        kind, payload = parent.recv()
        if kind != "ready":
            self._proc.join(timeout=10)
            raise RecordingError(f"cannot record (store={store}, bag={bag}): {payload}")
        self._bag_buffer: list = []
        self._steps: list = []
        self._meta: dict = {}
        self._seed = -1
        self.active = False
        self.broken: str | None = None
        self.committed = self.messages = 0
        self.error: str | None = None

    def _send(self, item) -> None:
        if self.broken is None:
            try:
                self._conn.send(item)
            except (OSError, ValueError) as e:
                self.broken = f"the recorder process is gone ({e})"

    # ---- episodes ---------------------------------------------------------------------------------
    def begin(self, seed: int = -1, **metadata) -> None:
        if self.recording_episodes:
            self._steps, self._meta, self._seed, self.active = [], metadata, int(seed), True

    def add(self, obs: dict, action, intervention: bool) -> None:
        if self.active:
            self._steps.append(({k: np.asarray(v)[0] for k, v in obs.items()}, np.asarray(action, np.float32), bool(intervention)))

    def end(self, success: bool, **metadata) -> None:
        """Close the current episode and send it for commit (an episode without steps is dropped)."""
        if not self.active:
            return
        self.active = False
        steps = self._steps
        if not steps:
            return
        n = len(steps)
        data = {f"obs/{k}": np.stack([s[0][k] for s in steps]) for k in steps[0][0]}
        data["action"] = np.stack([s[1] for s in steps]).astype(np.float32)
        data["intervention"] = np.array([s[2] for s in steps], dtype=bool)
        last = np.zeros(n, dtype=bool)
        last[-1] = True
        data["success"] = last & bool(success)
        data["terminated"] = data["success"].copy()
        data["truncated"] = last & (not success)
        data["reward"] = np.zeros(n, np.float32)
        data["progress"] = np.zeros(n, np.float32)
        source = "intervention" if data["intervention"].any() else ("expert" if self.policy_name == "expert" else "policy")
        meta = {**self._meta, **metadata, "policy": self.policy_name}
        self._send(("episode", data, source, bool(success), meta, self._seed))

    # ---- rosbag -----------------------------------------------------------------------------------
    def record(self, topic: str, msg, t_ns: int | None = None) -> None:
        if self.recording_bag:
            self._bag_buffer.append((topic, time.time_ns() if t_ns is None else t_ns, msg.serialize()))

    def flush(self) -> None:
        """Send the buffered bag messages (once per tick, after the command went out)."""
        if self._bag_buffer:
            self._send(("bag", self._bag_buffer))
            self._bag_buffer = []

    def close(self) -> None:
        """Commit what is pending (a running episode as partial) and wait for the writer to finish."""
        self.end(False, partial=True)
        self.flush()
        self._send(("close",))
        if self.broken is None and self._conn.poll(120):
            try:
                _, self.committed, self.messages, self.error = self._conn.recv()
            except (EOFError, OSError):
                self.error = "the recorder process died before finishing"
        self._proc.join(timeout=30)
        if self._proc.is_alive():
            self._proc.kill()
        if self.broken is not None:
            self.error = self.error or self.broken
