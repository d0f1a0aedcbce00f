"""Residual RL with distributed actors and one learner on Ray (robot-rl-train-residual distributed.actors=N).

    ws = DistributedWorkspace(run_dir, cfg, env, base, DistributedConfig(actors=2), base_path=..., demo_store=...)
    ws.try_resume()
    result = ws.run(log)

Processes:
  learner (the calling process)  DistributedWorkspace: the single-process ResidualWorkspace (Learner, online
                                 Replay, demo buffer, checkpoints, logs, `learn()`: utd updates per transition),
                                 fed by actors instead of its own Collector.
  EnvActor x N (Ray actors)      each owns an env (built from the env config dict; either backend), the base policy
                                 (loaded from its checkpoint inside the actor), a copy of the residual actor's
                                 weights and a Collector writing `batch_steps` vector steps into a local Replay.
                                 A batch carries (slot, seq), its rows with their intervention flags, and the
                                 episodes that ended in it. With rl.interventions=scripted each actor runs its own
                                 scripted human (its own budget); the batch carries their per-episode stats.
  RobotActor x R (Ray actors)    distributed.robots: the deploy node on a robot instead of an env (real/robot_actor.py),
                                 placed by the Ray resource robot_<name>; same batches, learned rewards only.
  EvalActor (Ray actor)          robot_rl.evaluation.evaluate_policy on the latest weights, on its own env.

Learner loop (one thread):
  - keeps `max_in_flight` collect() requests outstanding per actor: an actor never runs more than that many
    batches ahead of the learner (backpressure; nothing queues without bound);
  - an actor with nothing to send yet (a robot mid-episode) answers a heartbeat: alive, no batch;
  - a batch is accepted only when its seq is above its slot's high-water mark (a duplicate, e.g. a batch an actor
    resends to a restarted learner, is dropped); its rows go into the replay with the last one marked as a cut:
    rows of different actors interleave, so n-step returns stop at a batch's end and bootstrap from the stored
    next observation (a time-limit-like cut, never a termination). Human rows also go to the demo buffer, and
    the actors' per-episode intervention stats to the hil/ logs, as in single-process training. Then the
    `utd * transitions` updates run;
  - every `weight_sync_every` updates (and when the observation statistics freeze) the weights go once through
    the object store to every actor;
  - a dead actor (its request fails with RayActorError, or no answer for `actor_timeout_s`) is killed and replaced
    in the same slot, continuing the slot's sequence numbers; the other actors keep feeding the learner meanwhile.
    An actor whose collection raises (e.g. a robot's node loop died) stops the run with its error;
  - checkpoints are ResidualWorkspace checkpoints plus the slots' high-water marks and a (slot, seq, row) tag per
    replay row. A restarted learner resumes replay and marks from there, so a batch that is already in the replay
    is never added again. Batches collected after the last checkpoint die with the learner unless the actors
    outlive it (`detached`: named actors that keep their last `retain_batches` batches and replay them, oldest
    first, to every new learner session that attaches; the marks drop the ones it already has).
"""

from __future__ import annotations

import collections
import dataclasses
import hashlib
import os
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import torch

from robot_rl.common import checkpoint
from robot_rl.rl.replay import Replay, add_transitions
from policies.residual import ResidualConfig, ResidualPolicy, from_dict
from robot_rl.rl.rollout import Collector
from robot_rl.rl.train import ResidualRLConfig, ResidualWorkspace, _Clock

NAMESPACE = "robot_rl"  # Ray namespace of our named (detached) actors


class ActorFailure(RuntimeError):
    """An actor could not start, raised, or actors kept dying past distributed.max_actor_restarts; names the cause."""


@dataclasses.dataclass
class RobotConfig:
    """One robot actor (an entry of distributed.robots): the deploy node on a robot, run by a Ray actor that needs
    the Ray resource `robot_<name>` (advertised by the robot's computer: ray start --resources='{"robot_<name>": 1}';
    a local Ray instance started by the learner advertises it itself)."""

    name: str
    deploy: dict = dataclasses.field(default_factory=dict)  # overrides of the `deploy` config for this robot
    store: str | None = None  # episode store on the robot's computer that also records every episode (the deploy
    # node's recording path, as robot-rl-deploy record.store=...): the robot's data outlives the run

    def __post_init__(self):
        if not (isinstance(self.name, str) and self.name and all(c.isalnum() or c in "_-" for c in self.name)):
            raise ValueError(f"distributed.robots: name={self.name!r} must be a non-empty word (letters, digits, _ -)")
        if not isinstance(self.deploy, dict):
            raise ValueError(f"distributed.robots[{self.name}].deploy must be a mapping of deploy overrides")
        if self.store is not None and not (isinstance(self.store, str) and self.store):
            raise ValueError(f"distributed.robots[{self.name}].store={self.store!r} must be a path or null")

    @property
    def resource(self) -> str:
        return f"robot_{self.name}"


def check_robot_config(cfg: ResidualRLConfig, base) -> None:
    """ValueError unless residual RL can run on robots with `cfg` and `base` (a policy or its path): learned rewards
    (a robot has no simulator reward) and a base policy for the node."""
    if cfg.reward != "learned":
        raise ValueError(
            f"rl.reward={cfg.reward} needs the simulator's reward, which a robot does not have: train a reward model "
            "with robot-rl-train-reward and set rl.reward=learned rl.reward_model=<its run directory> for "
            "distributed.robots")
    if base is None:
        raise ValueError("distributed.robots: the deploy node runs a base policy plus the residual; give base=<a "
                         "BasePolicy checkpoint> (RL from scratch, mode=scratch, is not run on robots)")


@dataclasses.dataclass
class DistributedConfig:
    """How training spreads over Ray processes; configs/train_residual.yaml `distributed:`."""

    actors: int = 0  # env actor processes (0: single-process training, robot_rl/rl/train.py)
    batch_steps: int = 16  # vector steps per transition batch an actor sends (x env.num_envs transitions)
    max_in_flight: int = 2  # batch requests outstanding per actor: how far an actor may run ahead of the learner
    weight_sync_every: int = 50  # learner updates between weight pushes to the actors
    retain_batches: int = 64  # batches an actor keeps after sending them, replayed to a learner that reattaches
    detached: bool = False  # named actors that outlive the learner (a cluster, a robot): a restarted learner
    #                         reattaches to them instead of starting new ones
    max_actor_restarts: int = 10  # dead actors replaced per session before the run stops with the actor's error
    actor_timeout_s: float = 300.0  # an actor with requests outstanding and no batch for this long is replaced
    actor_cpus: float = 1.0  # Ray CPU resource per actor (env actors and the evaluation actor)
    actor_threads: int = 1  # torch intra-op threads in every actor process
    actor_device: str = "cpu"  # torch device of the base policy inside the actors
    address: str | None = None  # null: a new local Ray instance; "auto" or "host:6379": a running cluster
    num_cpus: int = 0  # local instance only: CPU slots it advertises (0: actors + 1, evaluation included)
    object_store_mb: int = 200  # local instance only: object store size (transition batches are small)
    robots: list = dataclasses.field(default_factory=list)  # robot actors: [{name, deploy: {overrides}}] (RobotConfig)

    def __post_init__(self):
        checks = [("actors", 0), ("batch_steps", 1), ("max_in_flight", 1), ("weight_sync_every", 1),
                  ("retain_batches", 0), ("max_actor_restarts", 0), ("actor_threads", 1), ("num_cpus", 0),
                  ("object_store_mb", 80)]
        for name, lo in checks:
            v = getattr(self, name)
            if not (isinstance(v, (int, np.integer)) and not isinstance(v, bool) and v >= lo):
                raise ValueError(f"distributed.{name}={v!r} must be a whole number >= {lo}")
        if not self.actor_timeout_s > 0:
            raise ValueError(f"distributed.actor_timeout_s={self.actor_timeout_s!r} must be > 0")
        if not self.actor_cpus >= 0:
            raise ValueError(f"distributed.actor_cpus={self.actor_cpus!r} must be >= 0")
        if self.address is not None and not (isinstance(self.address, str) and self.address):
            raise ValueError(f"distributed.address={self.address!r} must be null (local Ray), 'auto' or host:port")
        if not isinstance(self.robots, (list, tuple)):
            raise ValueError(f"distributed.robots={self.robots!r} must be a list of {{name, deploy}} entries")
        robots = []
        for r in self.robots:
            if isinstance(r, RobotConfig):
                robots.append(r)
                continue
            if not isinstance(r, dict):
                raise ValueError(f"distributed.robots entry {r!r} must be a mapping {{name, deploy}}")
            robots.append(from_dict(RobotConfig, r, "distributed.robots entry"))
        names = [r.name for r in robots]
        if len(set(names)) != len(names):
            raise ValueError(f"distributed.robots names {names} must be unique")
        self.robots = robots

    @classmethod
    def from_dict(cls, d: dict) -> "DistributedConfig":
        return from_dict(cls, d, "distributed")


def connect(d: DistributedConfig) -> bool:
    """Join Ray: the cluster at `d.address`, else a new local instance; True when this call started Ray (the
    caller shuts it down), False when Ray was already initialized in this process."""
    import ray

    if ray.is_initialized():
        return False
    # Actor processes inherit these (local) or get them from the job's runtime env (cluster).
    env_vars = {"OMP_NUM_THREADS": str(d.actor_threads), "MKL_NUM_THREADS": str(d.actor_threads)}
    if "JAX_PLATFORMS" in os.environ:
        env_vars["JAX_PLATFORMS"] = os.environ["JAX_PLATFORMS"]
    kw = dict(namespace=NAMESPACE, runtime_env={"env_vars": env_vars}, logging_level="WARNING")
    if d.address:
        ray.init(address=d.address, **kw)
    else:  # "local": never join a cluster by accident (RAY_ADDRESS, a `ray start` on this machine)
        # Ray runs its workers at nice 15 by default: on a machine busy with other work the actors then starve
        # next to the learner (measured: 2 actors collected no faster than 1). Same priority as the learner here.
        # The robots' resources too: on one machine the robot actors run next to the learner.
        ray.init(address="local", num_cpus=d.num_cpus or d.actors + len(d.robots) + 1, include_dashboard=False,
                 resources={r.resource: 1 for r in d.robots} or None, object_store_memory=d.object_store_mb * 2**20,
                 _system_config={"worker_niceness": 0}, **kw)
    return True


# ---- actor processes ---------------------------------------------------------------------------------------
def actor_weights(actor: torch.nn.Module) -> dict[str, np.ndarray]:
    """The residual actor's state (weights and frozen observation statistics) as numpy arrays."""
    return {k: v.detach().cpu().numpy().copy() for k, v in actor.state_dict().items()}


def process_setup(threads: int) -> None:
    """Torch (and OpenMP) threads of an actor process."""
    os.environ["OMP_NUM_THREADS"] = str(threads)
    torch.set_num_threads(threads)


def make_actor_env(env_cfg: dict):
    """An actor's env from an env config dict (dataclasses.asdict of an EnvConfig)."""
    import sim
    from sim.config import from_mapping

    return sim.make_from_config(from_mapping(env_cfg))


def make_actor_policy(env, base_path: str | None, device: str, residual: dict) -> ResidualPolicy:
    """A fresh residual policy on the base loaded from `base_path` (None: no base), checked against `env`."""
    from policies import load_policy

    base = load_policy(base_path, device=device) if base_path else None
    if base is not None:
        base.spec.check_env(env)
    return ResidualPolicy.build(base, ResidualConfig.from_dict(residual), env=env, device=device)


def load_weights(policy: ResidualPolicy, weights: dict) -> None:
    """Load actor_weights() output into a policy's residual actor."""
    policy.actor.load_state_dict({k: torch.from_numpy(np.array(v)) for k, v in weights.items()})


class BatchActor:
    """What every actor kind shares: sequence-numbered batches, the last `retain` of them kept, and a cursor per
    learner session: a session that attaches gets the retained batches first, oldest first, then fresh ones; its
    dedup drops what it has. A subclass's `_collect()` returns a new batch's fields, or None when it has nothing
    yet (a robot between episodes): the learner then gets a heartbeat, which keeps the actor from looking dead."""

    def _init_batches(self, slot: int, start_seq: int, retain: int) -> None:
        self.slot, self.seq = int(slot), int(start_seq)
        self.outbox: collections.deque = collections.deque(maxlen=int(retain))
        self.cursors: collections.OrderedDict = collections.OrderedDict()  # session -> next seq it gets

    def collect(self, session: str) -> dict:
        """The next batch for learner `session`: a retained one it has not had, else a new one (or a heartbeat)."""
        oldest = self.outbox[0]["seq"] if self.outbox else self.seq
        cur = max(self.cursors.pop(session, oldest), oldest)
        batch = self.outbox[cur - oldest] if cur < self.seq else self._new_batch()
        self.cursors[session] = cur if batch.get("heartbeat") else batch["seq"] + 1
        while len(self.cursors) > 8:  # sessions of learners long gone
            self.cursors.popitem(last=False)
        return batch

    def _new_batch(self) -> dict:
        fields = self._collect()
        if fields is None:
            return {"slot": self.slot, "heartbeat": True, "pid": os.getpid()}
        batch = {"slot": self.slot, "seq": self.seq, "pid": os.getpid(), **fields}
        self.seq += 1
        if self.outbox.maxlen:
            self.outbox.append(batch)
        return batch

    def _collect(self) -> dict | None:
        raise NotImplementedError


class EnvActor(BatchActor):
    """One collection process: env + base + residual copy + Collector (+ its own scripted human with
    rl.interventions=scripted, budget per actor); sends `batch_steps` vector steps at a time."""

    def __init__(self, slot: int, env_cfg: dict, base_path: str | None, device: str, residual: dict, reward: dict,
                 explore_std: float, batch_steps: int, seed: int, start_seq: int, retain: int, threads: int = 1,
                 hil: dict | None = None):
        """reward: {"reward", "reward_model", "shaping", "gamma"} of the ResidualRLConfig (a learned reward model is
        loaded here, so rewards and shaping are computed next to the env, as in single-process training).
        hil: the scripted human's settings (ScriptedHumanConfig fields), None without interventions."""
        process_setup(threads)
        self._init_batches(slot, start_seq, retain)
        self.batch_steps, self.version = int(batch_steps), -1
        self.env = make_actor_env(env_cfg)
        self.policy = make_actor_policy(self.env, base_path, device, residual)
        learned = None
        if reward["reward_model"]:
            from robot_rl.reward.shaping import from_config

            learned = from_config(reward["reward_model"], reward["reward"], reward["shaping"], reward["gamma"],
                                  [self.env])
        n = self.env.num_envs
        self.hil = None
        if hil is not None:
            from robot_rl.hil import InterventionController
            from robot_rl.hil.scripted import ScriptedHuman, ScriptedHumanConfig

            self.hil = InterventionController(n, ScriptedHuman(self.env, ScriptedHumanConfig(**hil)))
        self.local = Replay(self.batch_steps * n, n, self.policy.actor.obs_dim, self.env.action_dim)
        self.collector = Collector(self.env, self.policy, self.local, reward["reward"], explore_std, seed=seed + 1,
                                   learned=learned, hil=self.hil)
        self.collector.start(seed=seed)

    def set_weights(self, weights: dict, version: int) -> None:
        load_weights(self.policy, weights)
        self.version = int(version)

    def _collect(self) -> dict:
        t = time.perf_counter()
        self.local.written = 0
        for _ in range(self.batch_steps):
            self.collector.step(explore=True)
        rows = {k: v[: self.batch_steps].copy() for k, v in self.local.data.items()}
        rows["truncated"][-1] |= ~rows["terminated"][-1]  # the cut: n-step walks stop at the batch's end
        return {"weights_version": self.version, "rows": rows, "finished": self.collector.pop_finished(),
                "hil_episodes": self.hil.pop_finished() if self.hil is not None else [],
                "interventions": int(rows["intervention"].sum()), "collect_s": time.perf_counter() - t}

    def info(self) -> dict:
        return {"pid": os.getpid(), "slot": self.slot, "seq": self.seq, "version": self.version}


class EvalActor:
    """Evaluation in its own process: robot_rl.evaluation.evaluate_policy on weights sent by the learner."""

    def __init__(self, env_cfg: dict, base_path: str | None, device: str, residual: dict, threads: int = 1):
        process_setup(threads)
        self.env = make_actor_env(env_cfg)
        self.policy = make_actor_policy(self.env, base_path, device, residual)

    def evaluate(self, weights: dict, episodes: int, seed: int, videos: int = 0) -> dict:
        """Metrics of evaluate_policy; videos come back as bytes ({file name: mp4}) for the learner to write."""
        from robot_rl.evaluation import evaluate_policy

        load_weights(self.policy, weights)
        with tempfile.TemporaryDirectory() as d:
            m = evaluate_policy(self.env, self.policy, episodes, seed=seed, videos=videos,
                                video_dir=d if videos else None)
            if videos:
                m["video_bytes"] = {Path(p).name: Path(p).read_bytes() for p in m.pop("videos")}
        return m


def _last_line(err: BaseException) -> str:
    lines = [ln.strip() for ln in str(err).strip().splitlines() if ln.strip()]
    return lines[-1] if lines else type(err).__name__


# ---- learner side --------------------------------------------------------------------------------------------
class ActorPool:
    """The actors of one learner session: start or reattach, requests in flight, replacement of dead ones.
    Slots 0 .. actors-1 are env actors, the robot actors (distributed.robots, in order) follow."""

    def __init__(self, ws: "DistributedWorkspace"):
        import ray

        self.ray, self.ws, self.d = ray, ws, ws.dist
        self.session = uuid.uuid4().hex
        self.handles: dict[int, Any] = {}
        self.gen: dict[int, int] = {}  # replacements of each slot; results of older generations are ignored
        self.pending: dict = {}  # ObjectRef -> (slot, gen), in submission order
        self.next_seq: dict[int, int] = {}  # where a replacement continues the slot's sequence
        self.silent_s: dict[int, float] = {}  # learner time spent waiting since the slot's last batch
        self.pids: dict[int, list[int]] = collections.defaultdict(list)  # processes that sent batches, per slot
        self.restarts, self.reattached = 0, 0
        self.weights = None  # (ObjectRef, version) of the latest push

    def name(self, slot: int) -> str:
        return f"{self.ws.actor_prefix}-{slot}"

    def what(self, slot: int) -> str:
        robot = self.ws.robot(slot)
        return f"env actor {slot}" if robot is None else f"robot actor {robot.name} (slot {slot})"

    def start(self) -> None:
        if self.d.robots:  # a robot actor can only run where its robot is: refuse a cluster without that node
            have = self.ray.cluster_resources()
            for r in self.d.robots:
                if have.get(r.resource, 0) < 1:
                    raise ActorFailure(
                        f"robot actor {r.name}: no Ray node advertises the resource {r.resource}; on the robot's "
                        f"computer run ray start --address=<learner host>:6379 --resources='{{\"{r.resource}\": 1}}'")
        for slot in range(self.ws.slots):
            self.next_seq[slot] = self.ws.hwm.get(slot, -1) + 1
            handle = None
            if self.d.detached:
                try:
                    handle = self.ray.get_actor(self.name(slot), namespace=NAMESPACE)
                except ValueError:  # no such actor: a fresh run, or it died with its node
                    handle = None
            if handle is not None:
                self.reattached += 1
                self._adopt(slot, handle)
            else:
                self._create(slot)
        # Wait until every actor is up (env built, base loaded): an actor that cannot start stops the run here
        # with its error, and training time does not count the start-up.
        for slot, h in self.handles.items():
            try:
                self.ray.get(h.info.remote(), timeout=self.d.actor_timeout_s)
            except (self.ray.exceptions.RayActorError, self.ray.exceptions.GetTimeoutError) as e:
                raise ActorFailure(f"{self.what(slot)} did not start: {_last_line(e)}") from None

    def _create(self, slot: int) -> None:
        ws, d = self.ws, self.d
        seed = ws.cfg.seed + 100_003 * ws.starts  # every actor ever started in the run gets its own episodes
        ws.starts += 1
        robot = ws.robot(slot)
        opts: dict[str, Any] = {"num_cpus": d.actor_cpus, "max_restarts": 0}
        if robot is None:
            cls = EnvActor
            args = (slot, ws.env_cfg, ws.base_path, d.actor_device, dataclasses.asdict(ws.cfg.residual),
                    ws.reward_args, ws.cfg.explore_std, d.batch_steps, seed, self.next_seq[slot], d.retain_batches,
                    d.actor_threads, ws.cfg.hil if ws.cfg.interventions == "scripted" else None)
        else:
            cls = ws.robot_actor  # handed in by the deploy side (real/ sits above this layer)
            args = (slot, robot.name, ws.robot_deploy(robot), ws.env_cfg, ws.base_path, d.actor_device,
                    dataclasses.asdict(ws.cfg.residual), ws.reward_args, ws.cfg.explore_std, d.batch_steps, seed,
                    self.next_seq[slot], d.retain_batches, d.actor_threads, robot.store)
            opts["resources"] = {robot.resource: 1}  # placed on the robot's computer
        if d.detached:
            opts.update(name=self.name(slot), namespace=NAMESPACE, lifetime="detached")
        for attempt in range(20):
            try:
                handle = self.ray.remote(cls).options(**opts).remote(*args)
                break
            except ValueError:  # the name of a just-killed detached actor is released asynchronously
                if attempt == 19:
                    raise
                time.sleep(0.25)
        self._adopt(slot, handle)

    def _adopt(self, slot: int, handle) -> None:
        self.handles[slot] = handle
        self.gen[slot] = self.gen.get(slot, -1) + 1
        self.silent_s[slot] = 0.0
        if self.weights is not None:
            handle.set_weights.remote(*self.weights)

    def push_weights(self, weights: dict, version: int) -> None:
        """Send weights to every actor (one object-store copy; each actor loads it before its next batch)."""
        self.weights = (self.ray.put(weights), int(version))
        for h in self.handles.values():
            h.set_weights.remote(*self.weights)

    def next_batches(self, timeout: float = 1.0) -> list[dict]:
        """Fill every actor's pipeline, wait up to `timeout` s, return the batches that arrived (per slot in
        sequence order); replaces dead or silent actors on the way."""
        ray = self.ray
        for slot, h in self.handles.items():
            busy = sum(1 for s, g in self.pending.values() if s == slot and g == self.gen[slot])
            for _ in range(self.d.max_in_flight - busy):
                self.pending[h.collect.remote(self.session)] = (slot, self.gen[slot])
        refs = list(self.pending)
        t = time.monotonic()
        ready, _ = ray.wait(refs, num_returns=1, timeout=timeout)
        if ready:  # everything else that is done as well
            ready, _ = ray.wait(refs, num_returns=len(refs), timeout=0)
        waited = time.monotonic() - t
        for slot in self.handles:  # only the learner's waiting counts: a slow learner makes no actor look dead
            self.silent_s[slot] += waited
        batches, dead = [], {}
        for ref in ready:
            slot, gen = self.pending.pop(ref)
            try:
                b = ray.get(ref)
            except ray.exceptions.RayActorError as e:
                if gen == self.gen[slot]:
                    dead[slot] = e
                continue
            except ray.exceptions.RayTaskError as e:  # the actor is alive but its collection raised: stop with it
                raise ActorFailure(f"{self.what(slot)} raised: {_last_line(e)}") from None
            if gen != self.gen[slot]:
                continue  # from a replaced actor: its slot's sequence numbers now belong to the replacement
            self.silent_s[slot] = 0.0
            if b.get("heartbeat"):  # alive, nothing to send yet (a robot between episodes)
                continue
            self.next_seq[slot] = max(self.next_seq[slot], b["seq"] + 1)
            if b["pid"] not in self.pids[slot]:
                self.pids[slot].append(b["pid"])
            batches.append(b)
        for slot in self.handles:
            if slot not in dead and self.silent_s[slot] > self.d.actor_timeout_s:
                dead[slot] = TimeoutError(f"no batch for {self.d.actor_timeout_s} s")
        for slot, err in dead.items():
            self._replace(slot, err)
        return sorted(batches, key=lambda b: (b["slot"], b["seq"]))

    def _replace(self, slot: int, err: BaseException) -> None:
        self.restarts += 1
        if self.restarts > self.d.max_actor_restarts:
            raise ActorFailure(f"{self.what(slot)} failed ({_last_line(err)}); {self.restarts} failures exceed "
                               f"distributed.max_actor_restarts={self.d.max_actor_restarts}")
        print(f"distributed: {self.what(slot)} failed ({type(err).__name__}); starting a replacement", flush=True)
        self.pending = {r: sg for r, sg in self.pending.items() if sg[0] != slot}
        try:
            self.ray.kill(self.handles[slot], no_restart=True)
        except Exception:  # already gone
            pass
        self._create(slot)

    def close(self, keep: bool = False) -> None:
        """Kill the actors (`keep`: leave detached ones running for a learner that reattaches)."""
        self.pending.clear()
        if keep:
            return
        # Robot actors first stop their deploy node between ticks (the robot holds its last command), then go.
        stops = [h.shutdown.remote() for slot, h in self.handles.items() if self.ws.robot(slot) is not None]
        if stops:
            self.ray.wait(stops, num_returns=len(stops), timeout=30)
        for h in self.handles.values():
            try:
                self.ray.kill(h, no_restart=True)
            except Exception:
                pass


class Evaluator:
    """The evaluation actor: periodic evaluations run while training goes on (one at a time), the final one
    blocks."""

    def __init__(self, ws: "DistributedWorkspace"):
        import ray

        self.ray, self.ws = ray, ws
        self.ref, self.at = None, None
        self._start()

    def _start(self) -> None:
        ws, d = self.ws, self.ws.dist
        self.handle = self.ray.remote(EvalActor).options(num_cpus=d.actor_cpus, max_restarts=0).remote(
            ws.eval_env_cfg, ws.base_path, d.actor_device, dataclasses.asdict(ws.cfg.residual), d.actor_threads)

    def submit(self, step: int, train_time: float) -> bool:
        """Start an evaluation of the current weights (logged at `step`); False when one is still running."""
        if self.ref is not None:
            return False
        cfg = self.ws.cfg
        self.ref = self.handle.evaluate.remote(self.ray.put(actor_weights(self.ws.policy.actor)), cfg.eval_episodes,
                                               cfg.eval_seed, 0)
        self.at = (step, train_time)
        return True

    def poll(self, log, block: bool = False) -> None:
        """Log a finished periodic evaluation (waiting for it when `block`)."""
        if self.ref is None:
            return
        if not self.ray.wait([self.ref], timeout=None if block else 0)[0]:
            return
        ref, (step, train_time), self.ref = self.ref, self.at, None
        try:
            m = self.ray.get(ref)
        except self.ray.exceptions.RayActorError:
            print(f"distributed: the evaluation actor died; evaluation at env step {step} skipped", flush=True)
            self._start()
            return
        log.scalars({"success_rate": m["success_rate"], "mean_return": m["mean_return"], "train_time_s": train_time},
                    step, prefix="eval/")

    def final(self, episodes: int, videos: int) -> dict:
        cfg = self.ws.cfg
        weights = self.ray.put(actor_weights(self.ws.policy.actor))
        try:
            m = self.ray.get(self.handle.evaluate.remote(weights, episodes, cfg.eval_seed, videos))
        except self.ray.exceptions.RayActorError:  # one more try on a fresh actor
            self._start()
            m = self.ray.get(self.handle.evaluate.remote(weights, episodes, cfg.eval_seed, videos))
        if videos:
            out = self.ws.run_dir / "videos"
            out.mkdir(parents=True, exist_ok=True)
            files = m.pop("video_bytes")
            for name, data in files.items():
                (out / name).write_bytes(data)
            m["videos"] = [str(out / name) for name in sorted(files)]
        return m

    def close(self) -> None:
        try:
            self.ray.kill(self.handle, no_restart=True)
        except Exception:
            pass


class InterventionLedger:
    """The learner's intervention bookkeeping when the humans (scripted, or teleop at a robot) are at the actors:
    the per-episode stats they send, and the human share of all accepted steps. Read by ResidualWorkspace._log
    like the single-process InterventionController (pop_finished, fraction)."""

    def __init__(self):
        self.finished: list = []  # robot_rl.hil.EpisodeInterventions of ended episodes, not logged yet
        self.total_steps = 0
        self.total_intervention_steps = 0

    def pop_finished(self) -> list:
        out, self.finished = self.finished, []
        return out

    @property
    def fraction(self) -> float:
        return self.total_intervention_steps / self.total_steps if self.total_steps else 0.0


class DistributedWorkspace(ResidualWorkspace):
    """ResidualWorkspace whose transitions come from Ray actors; same learner, replay, checkpoints and logs.

    `env` (and `eval_env`) give the shapes and the env configs the actors build their own envs from; the learner
    never steps them. `base_path`: the base's checkpoint directory, loaded inside every actor (None: no base).
    `deploy`: the deploy config mapping (configs/deploy) the robot actors' nodes start from (each robot's own
    overrides on top) and `robot_actor`: the Ray actor class that runs them (real.robot_actor.RobotActor: the
    deploy side sits above this layer and hands its actor in); both needed with distributed.robots only."""

    def __init__(self, run_dir, cfg: ResidualRLConfig, env, base, dist: DistributedConfig, base_path: str | None,
                 demo_store=None, eval_env=None, deploy: dict | None = None, robot_actor: type | None = None):
        if dist.actors + len(dist.robots) < 1:
            raise ValueError(f"distributed.actors={dist.actors} and no distributed.robots: distributed training "
                             "needs at least one actor")
        if base is not None and not base_path:
            raise ValueError("distributed training loads the base inside every actor: pass base_path, the base's "
                             "checkpoint directory")
        if dist.robots:
            check_robot_config(cfg, base)
            if not deploy:
                raise ValueError("distributed.robots needs the deploy config (configs/deploy/*) its nodes start from")
            if robot_actor is None:
                raise ValueError("distributed.robots needs the robot actor class of the deploy side: pass "
                                 "robot_actor=real.robot_actor.RobotActor")
        self.robot_actor = robot_actor
        self.dist = dist  # before the workspace is built: takes_interventions() reads it
        self.deploy = dict(deploy or {})
        super().__init__(run_dir, cfg, env, base, demo_store=demo_store, eval_env=eval_env)
        # Humans act at the actors (each env actor its own scripted human, robots through the node's teleop topic):
        # the learner keeps only their bookkeeping.
        self.hil = InterventionLedger() if self.takes_interventions() else None
        self.base_path = str(Path(base_path).resolve()) if base_path else None
        self.env_cfg = dataclasses.asdict(env.cfg)
        self.eval_env_cfg = dataclasses.asdict((eval_env if eval_env is not None else env).cfg)
        self.reward_args = {"reward": cfg.reward, "shaping": cfg.shaping, "gamma": cfg.learner.gamma,
                            "reward_model": str(Path(cfg.reward_model).resolve()) if cfg.reward_model else None}
        run_id = hashlib.sha1(str(self.run_dir.resolve()).encode()).hexdigest()[:12]
        self.actor_prefix = f"robot_rl-{run_id}-actor"
        self.hwm: dict[int, int] = {}  # slot -> highest batch seq in the replay (persisted in checkpoints)
        self.tags = np.full((self.replay.rows, 3), -1, np.int64)  # per replay row: slot, seq, row in batch
        self.duplicates = 0  # batches dropped because the replay already had them (this session)
        self.lost = 0  # batches skipped in a slot's sequence (retained no longer, or died with an actor)
        self.interventions = 0  # intervention transitions accepted (this session)
        self.batches_by_pid: collections.Counter = collections.Counter()  # accepted batches per actor process
        self.collect_s = 0.0  # actor time spent collecting the accepted batches (this session)
        self.pool: ActorPool | None = None
        self.stop_requested = False  # set (e.g. from `progress`) to end the run after the current batch

    @property
    def slots(self) -> int:
        """Actor slots: env actors, then robot actors."""
        return self.dist.actors + len(self.dist.robots)

    def robot(self, slot: int) -> RobotConfig | None:
        """The robot of a slot (None: an env actor's slot)."""
        i = slot - self.dist.actors
        return self.dist.robots[i] if 0 <= i < len(self.dist.robots) else None

    def robot_deploy(self, robot: RobotConfig) -> dict:
        """The deploy config mapping of one robot's node: `deploy` with the robot's overrides merged in."""
        from omegaconf import OmegaConf

        return OmegaConf.to_container(OmegaConf.merge(self.deploy, robot.deploy), resolve=True)

    def takes_interventions(self) -> bool:
        # a human at a robot can always take over through the teleop topic
        return super().takes_interventions() or bool(self.dist.robots)

    # ---- checkpoints: the per-slot sequence marks and row tags ride along ------------------------------------
    def extra_state(self, tensors: dict) -> dict:
        state: dict[str, Any] = {"hwm": {str(k): int(v) for k, v in self.hwm.items()}}
        if self.cfg.save_replay:
            kept = min(self.replay.written, self.replay.rows)
            state["tags"] = checkpoint.flatten(self.tags[:kept].copy(), "distributed_tags", tensors)
        return {"distributed": state}

    def load_extra_state(self, train: dict, tensors: dict) -> None:
        state = train.get("distributed")
        if state is None:  # a single-process checkpoint: its rows carry no sequence numbers
            return
        self.hwm = {int(k): int(v) for k, v in state["hwm"].items()}
        if "tags" in state and "replay" in train:
            tags = checkpoint.unflatten(state["tags"], tensors)
            self.tags[: len(tags)] = tags

    # ---- the learner's side of the protocol ---------------------------------------------------------------
    def ingest(self, batch: dict) -> int:
        """Add an actor's batch to the replay unless it is already there; returns the transitions added.
        Rows past the env-step budget are not added (the run ends on this batch)."""
        slot, seq = int(batch["slot"]), int(batch["seq"])
        high = self.hwm.get(slot, -1)
        if seq <= high:
            self.duplicates += 1
            return 0
        self.lost += seq - high - 1
        self.hwm[slot] = seq
        rows, n = batch["rows"], self.replay.num_envs
        k = len(rows["obs"])
        k = min(k, -(-(self.cfg.env_steps - self.env_steps) // n)) if self.env_steps < self.cfg.env_steps else k
        for i in range(k):
            self.tags[self.replay.written % self.replay.rows] = (slot, seq, i)
            row = {f: v[i] for f, v in rows.items()}
            if i == k - 1:  # the batch's end, or where the budget cut it
                row["truncated"] = row["truncated"] | ~row["terminated"]
            self.replay.add(**row)
            if self.hil is not None and self.demos is not None and row["intervention"].any():
                # the human's transitions also go to the demo buffer, as route_interventions does single-process
                add_transitions(self.demos, {f: v[row["intervention"]] for f, v in row.items()})
        self.env_steps += k * n
        self.collector.finished.extend(batch["finished"])  # ResidualWorkspace._log reports them
        human = int(rows["intervention"][:k].sum())
        self.interventions += human
        if self.hil is not None:
            self.hil.finished.extend(batch.get("hil_episodes", []))
            self.hil.total_steps += k * n
            self.hil.total_intervention_steps += human
        self.batches_by_pid[int(batch["pid"])] += 1
        self.collect_s += float(batch["collect_s"]) * k / len(rows["obs"])
        return k * n

    def run(self, log, progress=None) -> dict:
        """Train until the budget is spent (or `stop_requested`); `progress(env_steps)` after every batch."""
        cfg, d = self.cfg, self.dist
        owns_ray = connect(d)
        start_steps, saved_at, evaluator, failed, final = self.env_steps, None, None, True, None
        lag: list[int] = []

        def crossed(every: int, before: int) -> bool:
            return every > 0 and self.env_steps // every > before // every

        def flush_log():
            self._log(log, window["metrics"], window["updates"] / max(window["update_s"], 1e-9),
                      (self.env_steps - window["steps"]) / max(clock.now() - window["t"], 1e-9))
            log.scalars({"actors": len(self.pool.handles), "restarts": self.pool.restarts,
                         "duplicates_dropped": self.duplicates, "lost_batches": self.lost,
                         "interventions": self.interventions,
                         "policy_lag_updates": float(np.mean(lag)) if lag else 0.0}, self.env_steps, prefix="dist/")
            lag.clear()
            window.update(metrics=[], updates=0, update_s=0.0, steps=self.env_steps, t=clock.now())

        try:
            self.pool = ActorPool(self)
            self.pool.push_weights(actor_weights(self.policy.actor), self.learner.updates)
            synced = self.learner.updates
            if cfg.eval_every > 0 or cfg.final_eval:
                evaluator = Evaluator(self)  # starts while the env actors do
            self.pool.start()
            clock = _Clock(self.train_time)  # training time: from here on, evaluations excluded
            train_start = self.train_time
            window = {"metrics": [], "updates": 0, "update_s": 0.0, "steps": self.env_steps, "t": clock.now()}
            while (self.env_steps < cfg.env_steps and not self.stop_requested
                   and not (cfg.time_budget_s and clock.now() >= cfg.time_budget_s)):
                for batch in self.pool.next_batches():
                    before = self.env_steps
                    added = self.ingest(batch)
                    if not added:
                        continue
                    if batch["weights_version"] >= 0:
                        lag.append(self.learner.updates - batch["weights_version"])
                    frozen = self.stats_frozen
                    self.learn(added, window)
                    if self.stats_frozen != frozen or self.learner.updates - synced >= d.weight_sync_every:
                        self.pool.push_weights(actor_weights(self.policy.actor), self.learner.updates)
                        synced = self.learner.updates
                    self.train_time = clock.now()
                    if crossed(cfg.log_every, before):
                        flush_log()
                    if crossed(cfg.eval_every, before) and self.env_steps < cfg.env_steps:
                        evaluator.submit(self.env_steps, self.train_time)
                    if crossed(cfg.ckpt_every, before):
                        self.save()
                        saved_at = self.env_steps
                    if progress is not None:
                        progress(self.env_steps)
                    if self.env_steps >= cfg.env_steps or self.stop_requested:
                        break
                if evaluator is not None:
                    evaluator.poll(log)
            self.pool.close()  # the actors' CPUs go to the final evaluation
            if self.env_steps > window["steps"]:
                flush_log()
            if saved_at != self.env_steps:
                self.save()
            self.policy.save(self.run_dir / "policy")
            if evaluator is not None:
                with clock.paused():
                    evaluator.poll(log, block=True)
                    if cfg.final_eval:
                        final = evaluator.final(cfg.final_eval_episodes or cfg.eval_episodes, cfg.videos)
                if final is not None:
                    log.scalars({"success_rate": final["success_rate"], "mean_return": final["mean_return"],
                                 "train_time_s": self.train_time}, self.env_steps, prefix="eval/")
            log.plot(self.run_dir / "curves.png",
                     ["eval/success_rate", "rollout/success_rate", "train/critic_loss", "q/mean",
                      "residual/abs_mean", "perf/updates_per_s", "perf/env_steps_per_s"],
                     title=f"residual RL {self.env.cfg.task}, {self.slots} actors")
            failed = False
        finally:
            if self.pool is not None:
                # a crashed learner leaves detached actors running: a restarted one reattaches and resumes
                self.pool.close(keep=failed and d.detached)
            if evaluator is not None:
                evaluator.close()
            if owns_ray:
                import ray

                ray.shutdown()
        return {"final_eval": final, "env_steps": self.env_steps, "updates": self.learner.updates,
                "episodes": self.episodes, "train_time_s": self.train_time, "eval_time_s": clock.paused_s,
                "env_steps_this_session": self.env_steps - start_steps,
                "distributed": {"actors": d.actors, "robots": [r.name for r in d.robots],
                                "restarts": self.pool.restarts,
                                # an actor's own rate while collecting, and the share of time the actors were
                                # collecting rather than waiting for the learner
                                "actor_steps_per_s": (self.env_steps - start_steps) / max(self.collect_s, 1e-9),
                                "actor_busy": self.collect_s / max(self.slots * (self.train_time - train_start), 1e-9),
                                "reattached": self.pool.reattached, "duplicates_dropped": self.duplicates,
                                "lost_batches": self.lost, "interventions": self.interventions,
                                "batch_steps": d.batch_steps, "address": d.address}}
