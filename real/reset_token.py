"""The per-run reset token: who may clear a latched stop.

Anyone on the DDS domain can publish on the reset topic, so a reset message clears a latch only when it
carries (std_msgs/String data) the random token the node drew at start-up. robot-rl-deploy prints it and writes
it, readable by its own user only (mode 0600), to <run dir>/reset_token:

    ros2 topic pub --once /robot_rl/reset std_msgs/msg/String "{data: $(cat runs/deploy/<run>/reset_token)}"

The operator at the node's machine can also reset without the token: `kill -USR1 <pid>` (printed at start-up).
A reset still needs the e-stop released and fresh joint states (real/safety.py).
"""

from __future__ import annotations

import secrets
from pathlib import Path

from robot_rl.common.atomic import atomic_put

FILE = "reset_token"


def new_token() -> str:
    """A fresh random token (32 hex digits)."""
    return secrets.token_hex(16)


def write_token(run_dir: str | Path, token: str) -> Path:
    """Write the token to <run_dir>/reset_token, readable by the owner only (an older run's token there is replaced)."""
    path = Path(run_dir) / FILE
    atomic_put(path, (token + "\n").encode(), mode=0o600)
    return path
