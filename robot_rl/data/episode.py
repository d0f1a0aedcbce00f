"""What an episode is: per-step arrays and per-episode attributes, and the checks an append runs on them.

An Episode's steps share one length T (axis 0 is time) and must include a bool `intervention` mask; the first
episode of a store fixes its keys, per-step shapes and dtypes (a KeySpec each). `validate` returns StoreError
naming the episode of the batch, the key and the fix.
"""

from __future__ import annotations

import dataclasses
import json
import re

import numpy as np

from robot_rl.data.errors import StoreError

SOURCES = ("expert", "teleop", "policy", "intervention")
INTERVENTION = "intervention"
# metadata key of the observation an episode ended in ({vector key: [dim] floats}): the per-step arrays hold the
# observation before each action, so an episode's success state is only here (robot_rl/reward trains on it)
FINAL_OBS = "final_obs"
# Per-episode attributes: name -> zarr dtype. Strings are variable-length UTF-8.
EPISODE_ATTRS = {"task": str, "instruction": str, "source": str, "success": "bool", "seed": "int64", "metadata": str}
_KEY_PART = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.\-]*$")


@dataclasses.dataclass
class Episode:
    """One episode: per-step arrays (all of length T, axis 0 is time) and per-episode attributes."""

    steps: dict[str, np.ndarray]
    task: str
    source: str
    success: bool
    instruction: str = ""
    seed: int = -1
    metadata: dict = dataclasses.field(default_factory=dict)

    @property
    def length(self) -> int:
        return len(self.steps[INTERVENTION])


@dataclasses.dataclass(frozen=True)
class KeySpec:
    shape: tuple[int, ...]  # per step
    dtype: np.dtype


def validate(ep: Episode, i: int, schema: dict[str, KeySpec] | None) -> tuple[dict, dict]:
    """(steps as numpy arrays, attrs) of episode i of a batch, or StoreError naming the key and the fix."""
    where = f"episode {i} of the batch"
    if not isinstance(ep, Episode):
        raise StoreError(f"{where} is a {type(ep).__name__}, expected robot_rl.data.Episode")
    if not isinstance(ep.steps, dict) or not ep.steps:
        raise StoreError(f"{where}: steps must be a non-empty dict of per-step arrays, got {type(ep.steps).__name__}")
    steps = {}
    for key, value in ep.steps.items():
        _check_key_name(key, where)
        a = np.asarray(value)
        if a.ndim == 0:
            raise StoreError(f"{where}: key {key!r} is a scalar; give one value per step (shape [T, ...])")
        if a.dtype.kind not in "biufc":
            raise StoreError(f"{where}: key {key!r} has dtype {a.dtype}; per-step arrays must be bool, integer, float or complex")
        steps[key] = a
    if INTERVENTION not in steps:
        raise StoreError(
            f"{where}: missing key {INTERVENTION!r} (bool [T], True where a human was in control; all False for "
            "expert or policy data)"
        )
    if schema is None:
        for key in steps:  # the first episode defines the schema; 'obs' and 'obs/proprio' cannot both be arrays
            clash = [k for k in steps if k.startswith(key + "/")]
            if clash:
                raise StoreError(f"{where}: key {key!r} is also a prefix of {clash}; rename one of them")
        schema = {k: KeySpec(v.shape[1:], v.dtype) for k, v in steps.items()}
        if schema[INTERVENTION] != KeySpec((), np.dtype(bool)):
            s = steps[INTERVENTION]
            raise StoreError(f"{where}: key {INTERVENTION!r} has dtype {s.dtype} and per-step shape {list(s.shape[1:])}, expected bool and []")
    missing = sorted(set(schema) - set(steps))
    if missing:
        raise StoreError(f"{where}: missing key {missing[0]!r} (expected {_fmt(schema[missing[0]])}); every episode needs all store keys {sorted(schema)}")
    extra = sorted(set(steps) - set(schema))
    if extra:
        raise StoreError(f"{where}: unknown key {extra[0]!r}; the store's keys are {sorted(schema)} (a store's keys are fixed by its first episode)")
    n = len(steps[INTERVENTION])
    if n == 0:
        raise StoreError(f"{where} has zero steps; an episode needs at least one step")
    for key, a in sorted(steps.items()):
        spec = schema[key]
        if tuple(a.shape[1:]) != spec.shape:
            raise StoreError(f"{where}: key {key!r} has per-step shape {list(a.shape[1:])}, expected {list(spec.shape)}")
        if a.dtype != spec.dtype:
            raise StoreError(f"{where}: key {key!r} has dtype {a.dtype}, expected {spec.dtype}; cast it with .astype({str(spec.dtype)!r})")
        if len(a) != n:
            raise StoreError(f"{where}: key {key!r} has {len(a)} steps, expected {n} (the length of {INTERVENTION!r})")
    return steps, _validate_attrs(ep, where)


def _validate_attrs(ep: Episode, where: str) -> dict:
    if not (isinstance(ep.task, str) and ep.task):
        raise StoreError(f"{where}: task={ep.task!r} must be a non-empty string (e.g. 'lift')")
    if ep.source not in SOURCES:
        raise StoreError(f"{where}: source={ep.source!r}; valid sources: {', '.join(SOURCES)}")
    if not isinstance(ep.success, (bool, np.bool_)):
        raise StoreError(f"{where}: success={ep.success!r} must be a bool")
    if not isinstance(ep.instruction, str):
        raise StoreError(f"{where}: instruction={ep.instruction!r} must be a string")
    if isinstance(ep.seed, (bool, np.bool_)) or not isinstance(ep.seed, (int, np.integer)):
        raise StoreError(f"{where}: seed={ep.seed!r} must be an integer (-1 = unknown)")
    if not isinstance(ep.metadata, dict):
        raise StoreError(f"{where}: metadata must be a dict, got {type(ep.metadata).__name__}")
    try:
        metadata = json.dumps(ep.metadata, sort_keys=True, allow_nan=False)
    except (TypeError, ValueError) as e:
        raise StoreError(f"{where}: metadata must be JSON-serializable ({e})") from None
    return {"task": ep.task, "instruction": ep.instruction, "source": ep.source, "success": bool(ep.success),
            "seed": int(ep.seed), "metadata": metadata}


def _check_key_name(key, where: str) -> None:
    if not isinstance(key, str) or not all(_KEY_PART.match(p) for p in key.split("/")):
        raise StoreError(
            f"{where}: key {key!r} is not a valid name; use '/'-separated parts of letters, digits, '_', '.', '-' "
            "(e.g. 'obs/proprio')"
        )


def _fmt(spec: KeySpec) -> str:
    return f"{spec.dtype} per-step shape {list(spec.shape)}"
