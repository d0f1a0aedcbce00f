"""What distributed training is configured with: DistributedConfig (configs/train_residual.yaml `distributed:`),
its robot entries (RobotConfig) and the check that residual RL can run on robots at all."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from robot_rl.common.config import check_whole, from_mapping


if TYPE_CHECKING:
    from robot_rl.rl.train import ResidualRLConfig


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
    # Robot actors (real/robot_actor.py), one entry per robot (RobotConfig): each runs the deploy node (real/node.py,
    # the loop, safety layer and transport of robot-rl-deploy, configured by `deploy` plus the entry's overrides)
    # with base= and the current residual, and sends its transitions (teleop steps flagged as interventions) to the
    # learner; new weights reach the node between episodes. Needs rl.reward=learned rl.reward_model=... (a robot has
    # no simulator reward). Placed on the Ray node that advertises the resource robot_<name>, on the robot's computer:
    #   ray start --address=<learner host>:6379 --resources='{"robot_arm1": 1}'
    # (a local Ray instance advertises it itself). Example: distributed.robots='[{name: arm1, deploy: {domain_id: 3}}]'
    # An entry's `store: PATH` also records every episode into an episode store on the robot's computer.
    robots: list = dataclasses.field(default_factory=list)

    def __post_init__(self):
        check_whole(self, {"actors": 0, "batch_steps": 1, "max_in_flight": 1, "weight_sync_every": 1,
                           "retain_batches": 0, "max_actor_restarts": 0, "actor_threads": 1, "num_cpus": 0,
                           "object_store_mb": 80}, prefix="distributed.")
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
            robots.append(from_mapping(RobotConfig, r, "distributed.robots entry"))
        names = [r.name for r in robots]
        if len(set(names)) != len(names):
            raise ValueError(f"distributed.robots names {names} must be unique")
        self.robots = robots
