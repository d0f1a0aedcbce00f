"""Hydra config tree (YAML, shipped as package data so installed console scripts find it).

The config dataclasses hold every default, with its comment; importing this package (Hydra does, for every
command) stores those defaults in Hydra's ConfigStore as `schema/<name>`. A YAML here lists the node it extends
(`- /schema/<name>@_here_`) and only selects groups and overrides values, so a default lives in one place
(tests/test_config_defaults.py checks that composing a command gives the dataclass defaults).
"""

from __future__ import annotations

import importlib

# schema name -> the config dataclass whose defaults it holds
SCHEMAS = {
    "env": "robot_rl.sim.config:EnvConfig",
    "randomization": "robot_rl.sim.config:RandomizationConfig",
    "residual_rl": "robot_rl.rl.train:ResidualRLConfig",
    "scripted_human": "robot_rl.hil.scripted:ScriptedHumanConfig",
    "diffusion": "robot_rl.policies.diffusion.policy:DiffusionConfig",
    "vla": "robot_rl.policies.vla.policy:VLAConfig",
    "bc": "robot_rl.train_bc:BCConfig",
    "train_reward": "robot_rl.reward.train:RewardTrainConfig",
    "deploy": "robot_rl.real.config:DeployConfig",
    "distributed": "robot_rl.rl.distributed.config:DistributedConfig",
    "benchmark": "robot_rl.benchmark:BenchmarkConfig",
    "robustness": "robot_rl.robustness:RobustnessConfig",
}


def schema_class(name: str) -> type:
    module, cls = SCHEMAS[name].split(":")
    return getattr(importlib.import_module(module), cls)


def register_schemas() -> None:
    """Store each config dataclass's defaults as ConfigStore node schema/<name>."""
    from robot_rl.common.config import register

    for name in SCHEMAS:
        register("schema", name, schema_class(name))


register_schemas()
