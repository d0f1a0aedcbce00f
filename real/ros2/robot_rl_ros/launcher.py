"""The executable robot_rl_deploy: finds the robot_rl project, then runs real.cli.deploy:ros_main.

ROS 2 runs it with the system Python, whose path holds the ament install space and whatever PYTHONPATH names. An
editable install (`pip install -e`) is reachable only through a .pth file, which PYTHONPATH does not process, so the
project is looked up explicitly, first hit wins:
  1. ROBOT_RL_HOME (a robot_rl checkout);
  2. robot_rl installed where this Python imports from (`pip install /path/to/robot_rl` into a PYTHONPATH directory);
  3. the checkout this package was built from (colcon build: recorded in checkout.txt next to this file);
  4. the checkout this file lives in (colcon build --symlink-install).
The project's dependencies (torch, hydra, cyclonedds, ...) come from PYTHONPATH as the README sets it.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

ENTRY = "robot_rl.real.cli.deploy"
RECORD = Path(__file__).with_name("checkout.txt")


def fail(msg: str) -> None:
    """One line and exit code 2, as robot_rl.common.cli.fail (not importable before the project is found)."""
    print(f"robot_rl_deploy: {msg}", file=sys.stderr)
    raise SystemExit(2)


def is_checkout(path: Path) -> bool:
    return (path / "real" / "cli" / "deploy.py").is_file() and (path / "configs").is_dir()


def find_project() -> Path | None:
    """The robot_rl checkout to put first on sys.path, or None when robot_rl is importable as installed."""
    home = os.environ.get("ROBOT_RL_HOME")
    if home:
        if not is_checkout(Path(home)):
            fail(f"ROBOT_RL_HOME={home} is not a robot_rl checkout (no real/cli/deploy.py); point it at the repository "
                 "root or unset it")
        return Path(home).resolve()
    try:
        if importlib.util.find_spec(ENTRY) is not None:
            return None
    except ImportError:  # `real` is some other package
        pass
    candidates = [Path(RECORD.read_text().strip())] if RECORD.is_file() else []
    candidates.append(Path(__file__).resolve().parents[3])  # <checkout>/real/ros2/robot_rl_ros/launcher.py
    for path in candidates:
        if is_checkout(path):
            return path
    fail("cannot find the robot_rl project; install it into a directory on PYTHONPATH without -e "
         "(pip install /path/to/robot_rl) or set ROBOT_RL_HOME=/path/to/robot_rl")


def main() -> None:
    root = find_project()
    if root is not None:
        sys.path.insert(0, str(root))
    from robot_rl.real.cli.deploy import ros_main

    ros_main()
