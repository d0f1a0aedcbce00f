"""The node's episode state machine: when an episode may start stepping.

    no episode --start event--> anchoring: wait for a joint state received after the event (the robot was reset)
      -> priming: the first chunk is planned from the state the robot holds (position held meanwhile); a live
         teleop command skips it (a human acts from step 0)
      -> ready pending: the chunk arrived; the next status says `ready` (the sim driver starts physics on it)
      -> starting: step 0 waits for a joint state received after `ready` went out
      -> stepping, until the end event (-> no episode) or a safe stop; a reset after a stop restarts priming
    A hold (stale state or object) voids a first chunk in flight: priming plans it again.

In sim the first action acts from t = 0; without priming it would land inference-latency late here, and every
episode's first step would be short.
"""

from __future__ import annotations

import numpy as np


class EpisodeState:
    def __init__(self, task_target):
        self.index: int | None = None  # the running episode (None: none)
        self.seed = -1
        self.target = None if task_target is None else np.asarray(task_target, dtype=np.float64)
        self.done = 0  # episodes ended
        self.priming = False
        self.prime_sent = False  # the first chunk is requested
        self.ready_pending = False  # the first chunk arrived; `ready` goes out with the next status
        self.start_after: float | None = None  # step 0 starts on a state received after `ready` went out
        self.anchor_after: float | None = None  # re-anchor the command on a state received after this time

    def begin(self, ev: dict, target, t: float, implicit: bool = False) -> None:
        """A start event received at t (implicit: deploy.task_target's episode, no reset to wait for)."""
        self.index, self.seed = int(ev["index"]), int(ev.get("seed", -1))
        self.target = np.asarray(target, dtype=np.float64)
        self.restart()
        self.anchor_after = None if implicit else t

    def is_running(self, ev: dict) -> bool:
        """Whether an end event is the running episode's."""
        return self.index is not None and ev["index"] == self.index

    def end(self) -> None:
        self.done += 1
        self.index = None

    def restart(self) -> None:
        """Plan the first chunk again before stepping (new episode, reset after a stop)."""
        self.priming, self.prime_sent, self.ready_pending, self.start_after = True, False, False, None

    def anchor(self, state_t: float | None) -> bool | None:
        """None: wait for the state after the episode's reset; True: anchor the command on it now; False: anchored."""
        if self.anchor_after is None:
            return False
        if state_t is None or state_t < self.anchor_after:
            return None
        self.anchor_after = None
        return True

    def first_chunk(self) -> bool:
        """A chunk arrived: True when it was the first one of priming (then `ready` is due)."""
        if not self.priming:
            return False
        self.priming, self.ready_pending = False, True
        return True

    def status_sent(self, now: float) -> None:
        if self.ready_pending:  # step 0 starts on a state measured after the robot heard `ready`
            self.ready_pending = False
            self.start_after = now

    def may_step(self, state_t: float | None) -> bool:
        """Whether policy steps may run (priming over, `ready` heard, a state received since)."""
        if self.priming or self.ready_pending or (self.start_after is not None and state_t < self.start_after):
            return False
        self.start_after = None
        return True
