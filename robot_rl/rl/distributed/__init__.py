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

Modules:
  config.py     DistributedConfig (configs/train_residual.yaml `distributed:`), RobotConfig, check_robot_config
  cluster.py    connect(): join a Ray cluster or start a local instance; NAMESPACE of the named actors
  actors.py     the actor processes: BatchActor (sequence numbers, retained batches, per-session cursors),
                EnvActor, EvalActor, and their setup (process_setup, make_actor_env, make_actor_policy,
                actor_weights/load_weights); real/robot_actor.py builds its RobotActor from these
  pool.py       ActorPool: start/reattach, requests in flight, replacement of dead actors; ActorFailure
  evaluator.py  Evaluator: the learner's handle on the EvalActor (periodic and final evaluations)
  ledger.py     InterventionLedger: the learner's intervention bookkeeping when the humans are at the actors
  workspace.py  DistributedWorkspace: the learner (ingest with dedup, the training loop, checkpoint extras)
"""

from __future__ import annotations

from robot_rl.rl.distributed.actors import (BatchActor, EnvActor, EvalActor, actor_weights, load_weights,
                                           make_actor_env, make_actor_policy, process_setup)
from robot_rl.rl.distributed.cluster import NAMESPACE, connect
from robot_rl.rl.distributed.config import DistributedConfig, RobotConfig, check_robot_config
from robot_rl.rl.distributed.evaluator import Evaluator
from robot_rl.rl.distributed.ledger import InterventionLedger
from robot_rl.rl.distributed.pool import ActorFailure, ActorPool
from robot_rl.rl.distributed.workspace import DistributedWorkspace

__all__ = ["NAMESPACE", "ActorFailure", "ActorPool", "BatchActor", "DistributedConfig", "DistributedWorkspace",
           "EnvActor", "EvalActor", "Evaluator", "InterventionLedger", "RobotConfig", "actor_weights",
           "check_robot_config", "connect", "load_weights", "make_actor_env", "make_actor_policy", "process_setup"]
