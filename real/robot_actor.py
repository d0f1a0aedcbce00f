"""The robot actor of distributed residual RL: the deploy node on a robot, feeding the learner like an env actor.

    robot-rl-train-residual base=... rl.reward=learned rl.reward_model=... distributed.robots='[{name: arm1}]'

One Ray actor per robot (robot_rl/rl/distributed/pool.py places it on the Ray node that advertises `robot_<name>`,
the robot's computer). In its process:
  node thread     real/node.py's ControlNode, exactly as robot-rl-deploy runs it (fixed-rate loop, safety
                  layer, DDS or rclpy transport, base chunks from its inference worker), with two plug-ins:
                  NodeResidual  the residual the node adds every policy step (real/residual.py): the learner's
                                residual actor + exploration noise; it notes the base action of the step;
                  EpisodeTap    the node's recorder (real/recording.py's interface): keeps each episode's
                                steps (observation, executed action, intervention = teleop in control) in
                                memory, and applies the newest residual weights when an episode begins,
                                so weights change only between episodes;
  Ray's thread    collect(): finished episodes -> transitions (episode_transitions: base actions where the node
                  ran none, i.e. human and held steps, relabeled with the base; rewards and terminations from
                  the learned reward model; success from the episode end event for the statistics) ->
                  `batch_steps` x num_envs transitions per batch, the same (slot, seq) batches env actors send.
                  With too few transitions for a batch it answers a heartbeat after HEARTBEAT_S: the robot runs
                  in real time and never waits for the learner. set_weights(): stored for the next episode.

A robot has no simulator reward: rl.reward must be `learned`. The node's episode ends come from the episode
topic (the sim driver, or the operator's reset routine on hardware); a human takes over on the teleop topic.
"""

from __future__ import annotations

import os
import queue
import threading
import time

import numpy as np

from robot_rl.rl.distributed import BatchActor, load_weights, make_actor_env, make_actor_policy, process_setup
from robot_rl.policies.residual import flatten_obs
from robot_rl.real.residual import PolicyResidual

HEARTBEAT_S = 2.0  # collect() waits this long for enough transitions before answering a heartbeat


class NodeResidual(PolicyResidual):
    """The learner's residual actor + exploration noise as the node's residual (real/residual.py's PolicyResidual,
    residual_scale 1), as the sim Collector adds it; notes each step's base action for the recorder and swaps in
    new weights between episodes."""

    where = "on robot actors"
    instead = "train it in sim"

    def __init__(self, policy, explore_std: float, seed: int):
        super().__init__(policy, explore_std, seed)
        self.version = -1  # weights version the node acts with
        self.base: np.ndarray | None = None  # the base action of the current step, taken by the recorder
        self._pending = None
        self._lock = threading.Lock()

    def __call__(self, obs: dict, base: np.ndarray) -> np.ndarray:
        res = super().__call__(obs, base)
        self.base = np.asarray(base, np.float32)[0].copy()
        return res

    def take_base(self) -> np.ndarray | None:
        b, self.base = self.base, None
        return b

    def set_weights(self, weights: dict, version: int) -> None:
        """Keep weights for the next episode (any thread)."""
        with self._lock:
            self._pending = (weights, int(version))

    def between_episodes(self) -> None:
        """Load the newest weights (node thread, when an episode begins)."""
        with self._lock:
            pending, self._pending = self._pending, None
        if pending is not None:
            load_weights(self.policy, pending[0])
            self.version = pending[1]


class EpisodeTap:
    """The node's recorder: episodes in memory, handed to the robot actor when they end.

    The final observation (the next observation of the last step) is the state the node held at its last tick
    before the end event: the event is handled after the tick, possibly together with the next episode's first
    joint state. An episode cut short (a safe stop, a new start without an end) has none: its last step is
    dropped and the one before becomes a cut."""

    recording_bag = False
    recording_episodes = True

    def __init__(self, residual: NodeResidual, store=None):
        """store: a real.recording.DeploymentRecorder that also gets every call (the node's recording path to an
        episode store on the robot's computer), or None."""
        self.residual, self.store = residual, store
        self.node = None  # attach(): the node whose state gives final observations
        self.episodes: queue.Queue = queue.Queue()
        self.active = False
        self._steps: list = []
        self._version = -1
        self._tick_state = (None, None, None)

    def attach(self, node) -> None:
        self.node = node

    def begin(self, seed: int = -1, **metadata) -> None:
        if self.store is not None:
            self.store.begin(seed, **metadata)
        self.residual.between_episodes()
        self._steps, self._version, self.active = [], self.residual.version, True

    def add(self, obs: dict, action, intervention: bool) -> None:
        if self.store is not None:
            self.store.add(obs, action, intervention)
        base = self.residual.take_base()  # None where the node ran no residual: the human's or a held step
        if self.active:
            self._steps.append(({k: np.asarray(v)[0].copy() for k, v in obs.items()},
                                np.asarray(action, np.float32).copy(), bool(intervention), base))

    def end(self, success: bool, **metadata) -> None:
        if self.store is not None and self.store.active:
            self.store.end(success, **metadata)
        if not self.active:
            return
        self.active = False
        partial = bool(metadata.get("partial", False))
        final = None if partial else self._observe(self._tick_state)
        if self._steps:
            self.episodes.put({"steps": self._steps, "final": final, "success": bool(success) and not partial,
                               "partial": partial, "version": self._version})
        self._steps = []

    def _observe(self, state) -> dict | None:
        q, qd, obj = state
        node = self.node
        if node is None or q is None or node.target is None:
            return None
        obs = node.obs_model.observe(node.obs_model.phys(q, qd, obj), node.target)
        for cam, img in node.images.items():
            obs[f"images/{cam}"] = img[None]
        return {k: np.asarray(obs[k])[0].copy() for k in node.obs_keys}

    def record(self, topic: str, msg, t_ns: int | None = None) -> None:
        pass

    def flush(self) -> None:
        """Once per tick, after the command went out: remember the state of this tick (references only)."""
        if self.node is not None:
            self._tick_state = (self.node.q, self.node.qd, self.node.object_pose)
        if self.store is not None:
            self.store.flush()

    def close(self) -> None:
        self.end(False, partial=True)


def relabel_base(base, seq: dict[str, np.ndarray], idx: list[int], instruction: str = "") -> np.ndarray:
    """The base's first action [len(idx), A] at observations `idx` of an episode's sequence ({key: [T, ...]}),
    from a fresh chunk on the history up to there (the episode's first observation repeated before its start).
    `instruction`: the node's deploy.instruction, for a base that reads one."""
    spec = base.spec
    rows = np.clip(np.asarray(idx)[:, None] - np.arange(spec.obs_horizon - 1, -1, -1), 0, None)  # [n, h], oldest first
    windows = {k: seq[k][rows] for k in [*spec.obs_dims, *getattr(spec, "image_shapes", {})]}
    if getattr(spec, "instruction", False):
        from robot_rl.policies.base import INSTRUCTION

        windows[INSTRUCTION] = np.array([instruction] * len(idx), dtype=object)
    base.reset(None)
    return np.asarray(base.act(windows)[:, 0], np.float32)


def episode_transitions(ep: dict, keys: tuple[str, ...], base, reward,
                        instruction: str = "", once: bool = False) -> dict[str, np.ndarray] | None:
    """Transitions [T, ...] (the replay's fields) of one recorded episode, or None when it has no usable step.

    ep: EpisodeTap's {"steps": [(obs {key: [dim]}, action [A], intervention, base action [A] | None)], "final",
    "success"}; `base` relabels missing base actions (and gives the one at the final observation); `reward`: a
    robot_rl.reward.LearnedReward (its classifier decides rewards and terminations; an episode's end is a
    termination on success, else a cut that bootstraps); `once`: its success pays only at its first fire."""
    steps = list(ep["steps"])
    obs = [s[0] for s in steps]
    bases = [s[3] for s in steps]
    success = bool(ep["success"])
    if ep["final"] is not None:
        obs.append(ep["final"])
        bases.append(None)
    else:  # the last step's next observation is unknown: it is dropped, the step before ends in a cut
        steps = steps[:-1]
        success = False
    t = len(steps)
    if t < 1:
        return None
    seq = {k: np.stack([o[k] for o in obs]).astype(np.float32) for k in obs[0]}  # [T + 1, dim]
    missing = [i for i, b in enumerate(bases) if b is None]
    if missing:
        for i, b in zip(missing, relabel_base(base, seq, missing, instruction)):
            bases[i] = b
    base_actions = np.stack(bases).astype(np.float32)
    terminated, truncated = np.zeros(t, bool), np.zeros(t, bool)
    (terminated if success else truncated)[-1] = True
    cur = {k: v[:-1] for k, v in seq.items()}
    nxt = {k: v[1:] for k, v in seq.items()}
    eligible = None
    if once:  # the classifier's success pays at its first fire in the episode (rl.classifier_success=once|end)
        from robot_rl.reward.shaping import first_fires

        eligible = first_fires(reward.model.success(nxt), np.zeros(t, bool))
    r, terminated, truncated, potential, next_potential = reward.label(cur, nxt, terminated.copy(), terminated,
                                                                       truncated, eligible=eligible)
    return {"obs": flatten_obs(cur, keys), "base_action": base_actions[:-1],
            "action": np.stack([s[1] for s in steps]).astype(np.float32), "reward": np.asarray(r, np.float32),
            "next_obs": flatten_obs(nxt, keys), "next_base_action": base_actions[1:],
            "terminated": np.asarray(terminated, bool), "truncated": np.asarray(truncated, bool),
            "intervention": np.array([s[2] for s in steps], bool), "potential": np.asarray(potential, np.float32),
            "next_potential": np.asarray(next_potential, np.float32)}


class RobotActor(BatchActor):
    """A Ray actor that runs the deploy node on one robot and sends its transitions to the learner."""

    def __init__(self, slot: int, name: str, deploy: dict, env_cfg: dict, base_path: str | None, device: str,
                 residual: dict, reward: dict, explore_std: float, batch_steps: int, seed: int, start_seq: int,
                 retain: int, threads: int = 1, store: str | None = None):
        """deploy: the robot's deploy config mapping (configs/deploy + its overrides); env_cfg: the learner's env
        config (the task, its model and action space; num_envs sets the batch layout)."""
        from robot_rl.real.config import check_against_model, deploy_config
        from robot_rl.real.inference import InferenceWorker
        from robot_rl.real.node import ControlNode, model_joints
        from robot_rl.real.transport import make_transport
        from robot_rl.reward.shaping import from_config

        process_setup(threads)
        self._init_batches(slot, start_seq, retain)
        if reward["reward"] != "learned" or not reward["reward_model"]:
            raise ValueError(f"robot actor {name}: a robot has no simulator reward; set rl.reward=learned "
                             "rl.reward_model=<a robot-rl-train-reward run directory>")
        if not base_path:
            raise ValueError(f"robot actor {name}: the deploy node needs a base policy checkpoint (base=...)")
        self.name = name
        self.num_envs, self.batch_steps = int(env_cfg["num_envs"]), int(batch_steps)
        from robot_rl.sim.robot import get_robot

        self.dcfg = deploy_config(deploy, get_robot(env_cfg.get("robot", "primitive")))
        # the node's model: the task's MuJoCo C model, one env, nominal physics (a robot is not randomized)
        self.env = make_actor_env({**env_cfg, "num_envs": 1, "backend": "mujoco", "threads": 1, "randomization": {}})
        check_against_model(self.dcfg, model_joints(self.env))
        self.policy = make_actor_policy(self.env, base_path, device, residual)
        self.learned = from_config(reward["reward_model"], "learned", reward["shaping"], reward["gamma"], [self.env])
        self.once = reward.get("classifier_success", "once") != "every"  # rl.classifier_success
        unread = sorted(set(self.learned.model.spec.obs_dims) - set(self.policy.spec.obs_dims))
        if unread:
            raise ValueError(f"robot actor {name}: the reward model reads {unread}, which the base policy (and so "
                             "the node's recording) does not observe")
        self.residual = NodeResidual(self.policy, explore_std, seed)
        self.recorder = None  # the node's recording path to an episode store on this computer (store=...)
        if store is not None:
            from robot_rl.real.recording import DeploymentRecorder

            self.recorder = DeploymentRecorder(
                store=store, bag=None, bag_topics={}, task=self.env.task_name,
                instruction=self.dcfg.instruction or self.env.instructions()[0],
                obs_dims={k: (v,) for k, v in self.policy.spec.obs_dims.items()},
                action_dim=self.policy.spec.action_dim, policy_name=f"{base_path} + residual (robot actor {name})")
        self.tap = EpisodeTap(self.residual, self.recorder)
        inf = self.dcfg.inference
        self.worker = InferenceWorker(base_path, self.env.config_dict(), mode=inf.worker,
                                      torch_threads=inf.torch_threads, nice=inf.nice,
                                      realtime_priority=inf.realtime_priority)
        self.transport = None
        try:
            self.transport = make_transport(self.dcfg.transport, name=self.dcfg.node_name,
                                            domain_id=self.dcfg.domain_id, loopback=self.dcfg.loopback,
                                            realtime_priority=self.dcfg.realtime_priority)
            self.node = ControlNode(self.dcfg, self.env, self.worker, self.transport, residual=self.residual,
                                    residual_scale=1.0, recorder=self.tap, policy_name=base_path,
                                    log=lambda m: print(f"robot {name}: {m}", flush=True))
        except Exception:
            self.worker.close()
            if self.transport is not None:
                self.transport.close()
            raise
        self.tap.attach(self.node)
        # transitions ready for batches, oldest first (+ row_versions, residual_applied)
        self.ready: dict[str, list[np.ndarray]] = {}
        self.ready_n = 0
        self.finished: list[tuple[bool, float, int]] = []  # (end event success, learned return, length)
        self.hil_episodes: list = []
        self.episodes = 0
        self.node_error: str | None = None
        self.node_metrics: dict | None = None
        self.thread = threading.Thread(target=self._run_node, name=f"robot-{name}-node", daemon=True)
        self.thread.start()

    def _run_node(self) -> None:
        try:
            self.node_metrics = self.node.run()
        except BaseException as e:  # noqa: BLE001 - reported by collect() to the learner
            self.node_error = f"{type(e).__name__}: {e}"

    # ---- the learner's calls -------------------------------------------------------------------------------
    def set_weights(self, weights: dict, version: int) -> None:
        self.residual.set_weights(weights, version)

    def info(self) -> dict:
        return {"pid": os.getpid(), "slot": self.slot, "seq": self.seq, "robot": self.name,
                "node_weights_version": self.residual.version, "episodes": self.episodes,
                "status": self.node.status(), "node_error": self.node_error}

    def residual_weights(self) -> dict:
        """The weights the node's residual acts with now."""
        from robot_rl.rl.distributed import actor_weights

        return actor_weights(self.policy.actor)

    def shutdown(self) -> dict | None:
        """Stop the node loop (the robot holds its last command) and release the worker and transport."""
        self.node.stopping = True
        self.thread.join(timeout=10)
        self.worker.close()
        self.transport.close()
        if self.recorder is not None:
            self.tap.end(False, partial=True)  # an episode in progress is kept, marked partial
            self.recorder.close()
        return self.node_metrics

    # ---- batches ---------------------------------------------------------------------------------------------
    def _take_episode(self, ep: dict) -> None:
        from robot_rl.hil import EpisodeInterventions

        rows = episode_transitions(ep, self.policy.obs_keys, self.policy.base, self.learned,
                                   self.dcfg.instruction, once=self.once)
        self.episodes += 1
        if rows is None:
            return
        t = len(rows["reward"])
        for k, v in rows.items():
            self.ready.setdefault(k, []).append(v)
        self.ready.setdefault("row_versions", []).append(np.full(t, ep["version"], np.int64))
        self.ready.setdefault("residual_applied", []).append(np.array([s[3] is not None for s in ep["steps"][:t]]))
        self.ready_n += t
        human = rows["intervention"]
        self.hil_episodes.append(EpisodeInterventions(
            env=0, steps=t, intervention_steps=int(human.sum()),
            takeovers=int((human & ~np.r_[False, human[:-1]]).sum())))
        if not ep["partial"]:
            self.finished.append((bool(ep["success"]), float(rows["reward"].sum()), t))

    def _collect(self) -> dict | None:
        t0 = time.perf_counter()
        need = self.batch_steps * self.num_envs
        deadline = time.monotonic() + HEARTBEAT_S
        while self.ready_n < need:
            if self.node_error is not None or not self.thread.is_alive():
                raise RuntimeError(f"robot {self.name}: the deploy node stopped ({self.node_error or 'loop ended'})")
            try:
                ep = self.tap.episodes.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                return None
            self._take_episode(ep)
        data = {k: np.concatenate(v) for k, v in self.ready.items()}
        self.ready = {k: [v[need:]] for k, v in data.items()}
        self.ready_n -= need
        # num_envs columns, each a run of batch_steps consecutive robot steps: n-step walks stay inside a run, and
        # the batch's last row is cut (as an env actor's) so none walks from one run into the next
        rows = {k: np.swapaxes(v[:need].reshape(self.num_envs, self.batch_steps, *v.shape[1:]), 0, 1).copy()
                for k, v in data.items()}
        rows["truncated"][-1] |= ~rows["terminated"][-1]
        versions, applied = rows.pop("row_versions"), rows.pop("residual_applied")
        finished, self.finished = self.finished, []
        hil, self.hil_episodes = self.hil_episodes, []
        return {"weights_version": int(versions.min()), "rows": rows, "finished": finished, "hil_episodes": hil,
                "interventions": int(rows["intervention"].sum()), "collect_s": time.perf_counter() - t0,
                "robot": self.name,
                # per row, beside the replay's fields: the node's weights version, and whether its residual
                # computed the action (False: the human's or a held step, whose base action was relabeled)
                "row_versions": versions, "residual_applied": applied}
