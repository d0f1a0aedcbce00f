"""Fixed-rate tick schedule with lateness bookkeeping and optional phase lock to joint-state arrivals.

Ticks are due at t0 + k * period (absolute deadlines, so errors never accumulate). A tick that starts
more than one period late skips the ticks it overran (counted in `missed`); lateness is recorded per tick.

Phase lock: a robot publishing joint states at the node's own rate (ros2_control broadcasts at its update
rate) would otherwise leave a fixed random offset between a state's arrival and the tick that uses it,
up to a whole period. When the median interval between arrivals is within 10% of the period, the
schedule is shifted (at most `max_shift` per tick, so the rate stays put) until ticks fall `margin` after
the arrivals. With faster or irregular joint states it does nothing.
"""

from __future__ import annotations

import collections
import math
import time

import numpy as np


class TickClock:
    def __init__(self, rate_hz: float, phase_lock: bool = False, margin_s: float = 0.0005, max_shift_frac: float = 0.02):
        self.period = 1.0 / rate_hz
        self.phase_lock = phase_lock
        self.margin = margin_s
        self.max_shift = max_shift_frac * self.period
        self.t0 = time.monotonic()
        self.k = 0
        self.missed = 0
        self.lateness: collections.deque = collections.deque(maxlen=360_000)  # the last hour at 100 Hz
        self._arrivals: collections.deque = collections.deque(maxlen=64)
        self.locked = False
        self.overruns: list[tuple[int, float]] = []  # (tick number, lateness s) of ticks that skipped others

    @property
    def deadline(self) -> float:
        return self.t0 + self.k * self.period

    def arrival(self, t: float) -> None:
        """A joint state arrived at time.monotonic() `t`."""
        if self.phase_lock:
            self._arrivals.append(t)

    def _adjust_phase(self) -> None:
        a = np.asarray(self._arrivals)
        if len(a) < 16:
            return
        gaps = np.diff(a)
        med = float(np.median(gaps))
        self.locked = abs(med - self.period) < 0.1 * self.period
        if not self.locked:
            return
        # circular mean of the arrivals' phase within the period, relative to the schedule
        ph = 2 * math.pi * (((a - self.t0) % self.period) / self.period)
        mean = math.atan2(float(np.sin(ph).mean()), float(np.cos(ph).mean())) / (2 * math.pi) * self.period
        want = (mean + self.margin) % self.period  # the tick's phase we want
        err = (want + 0.5 * self.period) % self.period - 0.5 * self.period  # in [-P/2, P/2)
        self.t0 += float(np.clip(err, -self.max_shift, self.max_shift))

    def start_tick(self, now: float) -> None:
        """Book the tick that starts at `now` (>= deadline) and schedule the next one."""
        late = now - self.deadline
        if late > self.period:
            skip = int(late // self.period)
            self.missed += skip
            self.overruns.append((len(self.lateness), late))
            self.k += skip
            late = now - self.deadline
        self.lateness.append(late)
        self.k += 1
        if self.phase_lock:
            self._adjust_phase()

    def stats(self) -> dict:
        lat = np.asarray(self.lateness) * 1e3
        return {
            "ticks": len(lat),
            "missed_ticks": int(self.missed),
            "lateness_p50_ms": float(np.percentile(lat, 50)) if len(lat) else 0.0,
            "p99_lateness_ms": float(np.percentile(lat, 99)) if len(lat) else 0.0,
            "lateness_max_ms": float(lat.max()) if len(lat) else 0.0,
            "phase_locked": bool(self.locked),
            "overruns": [(k, round(late * 1e3, 3)) for k, late in self.overruns[:20]],
        }
