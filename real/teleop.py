"""The teleop topic: how a human takes over from the policy.

Message: std_msgs/Float64MultiArray on /robot_rl/teleop (deploy.topics.teleop), `data` = one action in
the policy's action space, normalized to [-1, 1] (lift with ee_delta: [dx, dy, dz, grip], see
sim/actions.py), layout.dim[0].label = "teleop". The teleop tool publishes at least every
deploy.teleop_timeout_s while the human holds the dead-man switch; the node then sends the human's action
(through the same IK and safety layer) instead of the policy's and records the step with intervention =
true. When messages stop, control returns to the policy, which restarts its chunk queue from the current
observation. A message of the wrong length or with NaN/inf is rejected and counted.
"""

from __future__ import annotations

import numpy as np

from robot_rl.real.messages import Float64MultiArray, float_array
from robot_rl.real.qos import RELIABLE

LABEL = "teleop"
QOS = RELIABLE


def teleop_message(action) -> Float64MultiArray:
    """The teleop message for one normalized action [A]."""
    a = np.clip(np.asarray(action, dtype=np.float64), -1.0, 1.0)
    return float_array(a, label=LABEL)


class TeleopPublisher:
    """What a teleop tool (robot_rl/hil devices, a spacemouse bridge) uses to publish take-over actions."""

    def __init__(self, transport, topic: str = "/robot_rl/teleop"):
        self._pub = transport.publisher(topic, Float64MultiArray, QOS)

    def send(self, action) -> None:
        self._pub.publish(teleop_message(action))
