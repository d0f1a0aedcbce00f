"""The learner's side of the actors: ActorPool starts or reattaches them, keeps requests in flight, and replaces
dead ones in their slots; ActorFailure is what stops a run because of an actor."""

from __future__ import annotations

import collections
import dataclasses
import time
import uuid
from typing import TYPE_CHECKING, Any

from robot_rl.rl.distributed.actors import EnvActor
from robot_rl.rl.distributed.cluster import NAMESPACE

if TYPE_CHECKING:
    from robot_rl.rl.distributed.workspace import DistributedWorkspace


class ActorFailure(RuntimeError):
    """An actor could not start, raised, or actors kept dying past distributed.max_actor_restarts; names the cause."""



def _last_line(err: BaseException) -> str:
    lines = [ln.strip() for ln in str(err).strip().splitlines() if ln.strip()]
    return lines[-1] if lines else type(err).__name__



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
