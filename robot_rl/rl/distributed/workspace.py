"""DistributedWorkspace: the learner of distributed training, a ResidualWorkspace fed by Ray actors (ingest with
per-slot dedup, the training loop, the sequence marks and row tags in checkpoints)."""

from __future__ import annotations

import collections
import hashlib
from pathlib import Path
from typing import Any

import numpy as np

from robot_rl.common import checkpoint
from robot_rl.rl.distributed.actors import actor_weights
from robot_rl.rl.distributed.cluster import connect
from robot_rl.rl.distributed.config import DistributedConfig, RobotConfig, check_robot_config
from robot_rl.rl.distributed.evaluator import Evaluator
from robot_rl.rl.distributed.ledger import InterventionLedger
from robot_rl.rl.distributed.pool import ActorPool
from robot_rl.rl.replay import add_transitions
from robot_rl.common.clock import TrainingClock
from robot_rl.rl.train import ResidualRLConfig, ResidualWorkspace


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
        # Operator labels, refits and checks (rl.labels, rl.guard) run in single-process training: the actors
        # train on the classifier as it is, and the final evaluation picks the policy.
        self.online = self.guard = None
        self.base_path = str(Path(base_path).resolve()) if base_path else None
        self.env_cfg = env.config_dict()
        self.eval_env_cfg = (eval_env if eval_env is not None else env).config_dict()
        self.reward_args = {"reward": cfg.reward, "shaping": cfg.shaping, "gamma": cfg.learner.gamma,
                            "classifier_success": cfg.classifier_success,
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
            clock = TrainingClock(self.train_time)  # training time: from here on, evaluations excluded
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
            if evaluator is not None:
                with clock.paused():
                    evaluator.poll(log, block=True)
                    if cfg.final_eval:
                        episodes = cfg.final_eval_episodes or cfg.eval_episodes
                        final = evaluator.final(episodes, cfg.videos)
                        log.evaluation(final, self.env_steps, self.train_time)
                        final = self.keep_best(final, lambda: evaluator.final(episodes, cfg.videos))
            self.policy.save(self.run_dir / "policy")
            log.plot(self.run_dir / "curves.png",
                     ["eval/success_rate", "rollout/success_rate", "train/critic_loss", "q/mean",
                      "residual/abs_mean", "perf/updates_per_s", "perf/env_steps_per_s"],
                     title=f"residual RL {self.env.task_name}, {self.slots} actors")
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
                "env_steps_this_session": self.env_steps - start_steps, **self.watch_summary(),
                "distributed": {"actors": d.actors, "robots": [r.name for r in d.robots],
                                "restarts": self.pool.restarts,
                                # an actor's own rate while collecting, and the share of time the actors were
                                # collecting rather than waiting for the learner
                                "actor_steps_per_s": (self.env_steps - start_steps) / max(self.collect_s, 1e-9),
                                "actor_busy": self.collect_s / max(self.slots * (self.train_time - train_start), 1e-9),
                                "reattached": self.pool.reattached, "duplicates_dropped": self.duplicates,
                                "lost_batches": self.lost, "interventions": self.interventions,
                                "batch_steps": d.batch_steps, "address": d.address}}
