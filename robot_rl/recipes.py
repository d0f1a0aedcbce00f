"""A task's recommended training settings (sim Task.recommended) as each command names their keys.

    recommended_settings("peg_insert", "train_bc")      # {"steps": 8000, "policy.temperature": 0.0}
    recommended_settings("peg_insert", "quickstart")    # {"bc.steps": 8000, "policy.temperature": 0.0, ...}

The commands apply them where their command line does not set the key (robot_rl/cli/common.py apply_recommended);
robot-rl-benchmark's task plans start from them (robot_rl/benchmark.py).
"""

from __future__ import annotations

# Task.recommended's sections -> the key prefix each command gives them
PREFIXES = {
    "train_bc": {"bc": "", "policy": "policy."},
    "train_residual": {"rl": "rl."},
    "quickstart": {"bc": "bc.", "policy": "policy.", "rl": "rl."},
}


def recommended_settings(task: str, command: str) -> dict:
    """{config key: value} of the task's recommended settings as `command` names the keys ({} for a task without
    any, or an unknown task: the command reports that itself)."""
    from robot_rl.sim.tasks import TASKS

    prefixes = PREFIXES[command]
    rec = getattr(TASKS.get(task), "recommended", None) or {}
    return {prefixes[section] + k: v for section, keys in rec.items() if section in prefixes for k, v in keys.items()}
