"""Training seconds: what every trainer reports as train_time_s (evaluations excluded, carried across resumes)."""

from __future__ import annotations

import contextlib
import time


class TrainingClock:
    """Seconds of training so far (continuing `before`, a resumed run's earlier segments), not counting the time
    spent inside paused()."""

    def __init__(self, before: float = 0.0):
        self.start, self.before, self.paused_s = time.perf_counter(), before, 0.0

    def now(self) -> float:
        return self.before + time.perf_counter() - self.start - self.paused_s

    @contextlib.contextmanager
    def paused(self):
        t = time.perf_counter()
        try:
            yield
        finally:
            self.paused_s += time.perf_counter() - t
