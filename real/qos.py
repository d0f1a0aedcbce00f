"""QoS profiles as data, one per kind of topic, matching ROS 2's presets (rmw_qos_profile_*).

    RELIABLE      reliable + volatile + keep-last 10: ROS 2's default and system-default profile. Commands
                  go out with it: ros2_control's controllers subscribe with system-default QoS, which a
                  best-effort publisher would not match. Reset and episode events come in with it.
    SENSOR_DATA   best effort + volatile + keep-last 5: joint states, poses, images in. A best-effort reader
                  matches both reliable and best-effort writers, so the node hears any joint_state_broadcaster.
    LATEST        reliable + volatile + keep-last 1: status; only the latest value matters.
    ESTOP         reliable + transient-local + keep-last 1: what an e-stop publisher offers. The writer keeps its
                  last value for readers that join later, so a node started while the button is pressed hears
                  it. A volatile or best-effort e-stop writer does not match the node's reader (DDS durability
                  and reliability are request-offered): the node latches a stop when one appears (real/node_io.py).
    ESTOP_READER  the node's side of ESTOP: the same durability and reliability with a deep queue, so a press
                  and a release that both arrive while the loop is busy are both read (keep-last 1 kept only
                  the release).
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
ESTOP = QosProfile(reliable=True, depth=1, transient_local=True)
ESTOP_READER = QosProfile(reliable=True, depth=1000, transient_local=True)
