"""Real-time scheduling of a control loop thread, as ros2_control's controller_manager does for its update loop.

`make_realtime(priority)` puts the calling thread under SCHED_FIFO at `priority` (1-99) so other processes
on a busy machine do not delay its ticks, and shortens Python's GIL switch interval so a background thread
of the same process (recording, inference results) hands the GIL back within 0.2 ms. It needs root,
CAP_SYS_NICE or an rtprio limit (e.g. `@realtime - rtprio 98` in /etc/security/limits.conf); without them
it warns once and the loop runs with normal scheduling. Linux's RT throttling (sched_rt_runtime_us) keeps
a runaway loop from starving the machine. The loop sleeps between ticks, so it takes a few % of a core.
"""

from __future__ import annotations

import os
import sys


def make_realtime(priority: int, log=print) -> bool:
    """SCHED_FIFO for the calling thread (priority 0: leave scheduling alone). True when it took effect."""
    sys.setswitchinterval(0.0002)
    if priority <= 0:
        return False
    if not hasattr(os, "sched_setscheduler"):
        log("realtime_priority: SCHED_FIFO is not available on this platform; running with normal scheduling")
        return False
    try:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(int(priority)))
        return True
    except (PermissionError, OSError) as e:
        log(f"realtime_priority={priority}: could not set SCHED_FIFO ({e}); running with normal scheduling. "
            "Grant an rtprio limit or CAP_SYS_NICE for real-time ticks")
        return False
