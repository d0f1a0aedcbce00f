"""Episode events: the JSON payload of std_msgs/String messages on the episode topic (/robot_rl/episode).

    {"event": "start", "index": 3, "seed": 0, "target": [0.47, -0.05, 0.12]}
    {"event": "end", "index": 3, "success": true, "steps": 27}

`start` is sent when a new episode's initial state is in place (the sim driver after its seeded reset; on
hardware, the operator's reset routine). It carries the task's goal vector `target` (sim/task.py: lift's
is the cube's x, y and the height to reach) and optionally the env `seed`. The node resets the policy,
starts recording and answers with its status (`episode` = index), which the sim driver waits for before
it lets physics run. `end` closes the episode with its success flag; the node commits the recording.
"""

from __future__ import annotations

import json

from real.messages import String

EVENTS = ("start", "end")


class EpisodeEventError(ValueError):
    pass


def start_event(index: int, target, seed: int | None = None) -> String:
    d = {"event": "start", "index": int(index), "target": [float(x) for x in target]}
    if seed is not None:
        d["seed"] = int(seed)
    return String(data=json.dumps(d))


def end_event(index: int, success: bool, steps: int) -> String:
    return String(data=json.dumps({"event": "end", "index": int(index), "success": bool(success), "steps": int(steps)}))


def parse(msg: String) -> dict:
    """The event dict, or EpisodeEventError naming what is wrong."""
    try:
        d = json.loads(msg.data)
    except (json.JSONDecodeError, TypeError):
        raise EpisodeEventError(f"episode event is not JSON: {msg.data[:80]!r}") from None
    if not isinstance(d, dict) or d.get("event") not in EVENTS or not isinstance(d.get("index"), int):
        raise EpisodeEventError(f"episode event needs 'event' in {EVENTS} and an integer 'index': {msg.data[:80]!r}")
    if d["event"] == "start" and "target" in d and not (
        isinstance(d["target"], list) and all(isinstance(x, (int, float)) for x in d["target"])
    ):
        raise EpisodeEventError(f"episode start 'target' must be a list of numbers: {msg.data[:80]!r}")
    return d
