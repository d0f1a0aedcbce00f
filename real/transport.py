"""The transport interface: how the control node and the sim driver reach ROS 2 topics.

Two implementations speak the same wire format: `dds` (Cyclone DDS from PyPI, no ROS needed;
real/transport_dds.py) and `rclpy` (on a ROS 2 host; real/transport_rclpy.py). Messages are the IDL
dataclasses of real/messages.py on both. Topic names are absolute ROS names ("/joint_states").

    sub = transport.subscribe("/joint_states", JointState, SENSOR_DATA)
    pub = transport.publisher("/forward_position_controller/commands", Float64MultiArray, RELIABLE)
    transport.wait(0.004)          # sleep until data arrives, wake() is called, or the timeout passes
    for msg, t_recv in sub.take(): # everything received since the last take, oldest first
        ...
    pub.publish(msg)
"""

from __future__ import annotations

import abc
import re

from robot_rl.real.qos import QosProfile

TRANSPORTS = ("dds", "rclpy")
_TOPIC = re.compile(r"^/[A-Za-z][A-Za-z0-9_]*(/[A-Za-z][A-Za-z0-9_]*)*$")


def check_topic_name(name: str, where: str) -> str:
    """A fully qualified ROS 2 topic name, or ValueError naming `where` and the rule."""
    if not (isinstance(name, str) and _TOPIC.match(name)):
        raise ValueError(
            f"{where}={name!r} is not a fully qualified ROS 2 topic name; use '/name' or '/ns/name' "
            "(letters, digits, underscores; each token starts with a letter)"
        )
    return name


class Subscription(abc.ABC):
    @abc.abstractmethod
    def take(self) -> list[tuple[object, float]]:
        """(message, receipt time.monotonic()) of every message received since the last call, oldest first."""

    def incompatible_writers(self) -> int:
        """How many writers on this topic offered a QoS this reader cannot match (a volatile writer for a
        transient-local reader, a best-effort one for a reliable reader): they publish and nothing arrives.
        -1 when the transport cannot tell."""
        return -1


class Publisher(abc.ABC):
    @abc.abstractmethod
    def publish(self, msg) -> None:
        """Send one message (non-blocking for best-effort, bounded blocking for reliable)."""

    def matched(self) -> int:
        """Number of subscribers currently matched (-1 when the transport cannot tell)."""
        return -1


class Transport(abc.ABC):
    @abc.abstractmethod
    def subscribe(self, topic: str, msg_type: type, qos: QosProfile) -> Subscription: ...

    @abc.abstractmethod
    def publisher(self, topic: str, msg_type: type, qos: QosProfile) -> Publisher: ...

    @abc.abstractmethod
    def wait(self, timeout_s: float) -> None:
        """Block up to timeout_s; return early when any subscription has data or wake() was called."""

    @abc.abstractmethod
    def wake(self) -> None:
        """Make a concurrent or the next wait() return now (thread-safe)."""

    def close(self) -> None:
        pass


def make_transport(kind: str, *, name: str, domain_id: int = 0, loopback: bool = False,
                   realtime_priority: int = 0, security: dict[str, str] | None = None) -> Transport:
    """The transport `kind` (dds | rclpy) in DDS domain `domain_id`; `name` is the ROS node name (rclpy only).

    dds with loopback and realtime_priority > 0 also gives Cyclone's receive threads real-time scheduling; `security`
    (dds only: the six files of DdsSecurity.files()) turns DDS Security on."""
    if kind == "dds":
        from robot_rl.real.transport_dds import DdsTransport

        return DdsTransport(domain_id=domain_id, loopback=loopback, realtime_priority=realtime_priority, security=security)
    if kind == "rclpy":
        from robot_rl.real.transport_rclpy import RclpyTransport

        if security:
            raise ValueError("deploy.dds_security is for transport=dds; with rclpy use SROS2 (docs/security.md)")
        return RclpyTransport(node_name=name, domain_id=domain_id)
    raise ValueError(f"unknown transport {kind!r}; valid transports: {', '.join(TRANSPORTS)}")
