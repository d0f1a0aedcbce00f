"""Joining Ray: a running cluster or a new local instance, and the namespace of our named actors."""

from __future__ import annotations

import os

from robot_rl.rl.distributed.config import DistributedConfig

NAMESPACE = "robot_rl"  # Ray namespace of our named (detached) actors


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
