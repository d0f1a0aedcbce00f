"""QoS profiles as data, one per kind of topic, matching ROS 2's presets (rmw_qos_profile_*).

    RELIABLE      reliable + volatile + keep-last 10: ROS 2's default and system-default profile. Commands
                  go out with it: ros2_control's controllers subscribe with system-default QoS, which a
                  best-effort publisher would not match.
    SENSOR_DATA   best effort + volatile + keep-last 5: joint states, poses, images in. A best-effort reader
                  matches both reliable and best-effort writers, so the node hears any joint_state_broadcaster.
    LATEST        reliable + volatile + keep-last 1: e-stop, reset, episode events, status; only the latest
                  value matters, and a reliable writer (as every e-stop button should be) matches.
"""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class QosProfile:
    reliable: bool
    depth: int
    transient_local: bool = False


RELIABLE = QosProfile(reliable=True, depth=10)
SENSOR_DATA = QosProfile(reliable=False, depth=5)
LATEST = QosProfile(reliable=True, depth=1)
