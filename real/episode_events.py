"""Episode events: the JSON payload of std_msgs/String messages on the episode topic (/robot_rl/episode).

    {"event": "start", "index": 3, "seed": 0, "target": [0.47, -0.05, 0.12]}
    {"event": "end", "index": 3, "success": true, "steps": 27}

`start` is sent when a new episode's initial state is in place (the sim driver after its seeded reset; on
hardware, the operator's reset routine). It carries the task's goal vector `target` (sim/task.py: lift's
is the cube's x, y and the height to reach) and optionally the env `seed`. The node resets the policy,
starts recording and answers with its status (`episode` = index), which the sim driver waits for before
it lets physics run. `end` closes the episode with its success flag; the node commits the recording.
Anything else (not JSON, NaN, unknown keys, a non-integer seed, a target of the wrong length, ...) is refused
with EpisodeEventError naming the kind; the node counts it and carries on.
"""

from __future__ import annotations

import json
import math

from robot_rl.real.messages import String

EVENTS = ("start", "end")
KEYS = {"start": {"event", "index", "target", "seed"}, "end": {"event", "index", "success", "steps"}}
MAX_CHARS = 65536  # an event is a few dozen characters; a larger payload is refused before it is parsed


class EpisodeEventError(ValueError):
    """A malformed episode event; `kind` names what is wrong (the node's counter rejected_episode_event_<kind>)."""

    def __init__(self, kind: str, msg: str):
        super().__init__(msg)
        self.kind = kind


def start_event(index: int, target, seed: int | None = None) -> String:
    d = {"event": "start", "index": int(index), "target": [float(x) for x in target]}
    if seed is not None:
        d["seed"] = int(seed)
    return String(data=json.dumps(d))


def end_event(index: int, success: bool, steps: int) -> String:
    return String(data=json.dumps({"event": "end", "index": int(index), "success": bool(success), "steps": int(steps)}))


def _whole(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and 0 <= v < 2**63


def _no_constant(name: str):
    raise ValueError(f"{name} is not a number")


def parse(msg: String, target_dim: int) -> dict:
    """The event dict, or EpisodeEventError naming what is wrong: JSON of one object with exactly the keys of its
    event, whole numbers >= 0 for index / seed / steps, a bool success, and a target of target_dim finite numbers."""
    data = msg.data
    head = repr(data[:80])
    if len(data) > MAX_CHARS:
        raise EpisodeEventError("size", f"episode event of {len(data)} characters (at most {MAX_CHARS}): {head}")
    try:
        d = json.loads(data, parse_constant=_no_constant)  # NaN and Infinity are not JSON numbers
    except (ValueError, TypeError, RecursionError):
        raise EpisodeEventError("json", f"episode event is not JSON: {head}") from None
    if not isinstance(d, dict) or d.get("event") not in EVENTS:
        raise EpisodeEventError("event", f"episode event needs 'event' in {EVENTS}: {head}")
    unknown = sorted(set(d) - KEYS[d["event"]])
    if unknown:
        raise EpisodeEventError("keys", f"episode {d['event']} event has unknown key(s) {unknown[:5]}; valid: "
                                f"{sorted(KEYS[d['event']])}: {head}")
    if not _whole(d.get("index")):
        raise EpisodeEventError("index", f"episode event needs an 'index' that is a whole number >= 0: {head}")
    for key in ("seed", "steps"):
        if key in d and not _whole(d[key]):
            raise EpisodeEventError(key, f"episode event '{key}' must be a whole number >= 0: {head}")
    if "success" in d and not isinstance(d["success"], bool):
        raise EpisodeEventError("success", f"episode end 'success' must be true or false: {head}")
    if "target" in d:
        t = d["target"]
        if not (isinstance(t, list) and len(t) == target_dim
                and all(isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) for x in t)):
            raise EpisodeEventError("target", f"episode start 'target' must be a list of {target_dim} finite numbers: {head}")
    return d
