"""The rclpy transport: the control node as a ROS 2 node on a host with ROS 2 (Humble, Jazzy) installed.

Subscriptions are served by a single-threaded executor in a background thread; callbacks convert the
rclpy message into the IDL dataclass of real/messages.py (field by field; the names are the ROS names)
and queue it with its receipt time. Publishing converts back (real/message_convert.py, tested against the
`rosbags` message classes since rclpy is not installable from the registries CI reaches).

The node runs in an rclpy context of its own, initialised with deploy.domain_id (rclpy.init(domain_id=...)) and the
command line's ROS arguments (`--ros-args ...`: remappings, node name from `ros2 launch`).
"""

from __future__ import annotations

import array
import collections
import importlib
import os
import sys
import threading
import time

from robot_rl.real.message_convert import convert_from, convert_to
from robot_rl.real.messages import ros_type_name
from robot_rl.real.qos import QosProfile
from robot_rl.real.transport import Publisher, Subscription, Transport, check_topic_name


def split_ros_args(argv: list[str]) -> tuple[list[str], list[str]]:
    """(other arguments, ROS arguments) of a command line; ROS arguments are the `--ros-args ... [--]` scopes."""
    other: list[str] = []
    ros: list[str] = []
    in_scope = False
    for arg in argv:
        if arg == "--ros-args":
            in_scope = True
            ros.append(arg)
        elif in_scope and arg == "--":
            in_scope = False
        else:
            (ros if in_scope else other).append(arg)
    return other, ros


def check_domain_env(domain_id: int, environ=os.environ) -> None:
    """Refuse a ROS_DOMAIN_ID that names another domain than deploy.domain_id (rclpy would silently pick one)."""
    env = environ.get("ROS_DOMAIN_ID", "").strip()
    if env and env != str(domain_id):
        raise ValueError(
            f"deploy.domain_id={domain_id} but ROS_DOMAIN_ID={env}: the node would not join the domain your ros2 tools "
            f"use; set deploy.domain_id={env} (ros2 launch: domain_id:={env}) or unset ROS_DOMAIN_ID"
        )


def rclpy_class(cls: type) -> type:
    """The rclpy message class of an IDL dataclass, e.g. sensor_msgs.msg.JointState."""
    pkg, sub, name = ros_type_name(cls).split("/")
    return getattr(importlib.import_module(f"{pkg}.{sub}"), name)


def _rclpy_float_seq(values):
    return array.array("d", values)


def _rclpy_byte_seq(data: bytes):
    return array.array("B", data)


def to_rclpy_qos(q: QosProfile):
    from rclpy.qos import DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy

    return QoSProfile(
        history=HistoryPolicy.KEEP_LAST, depth=q.depth,
        reliability=ReliabilityPolicy.RELIABLE if q.reliable else ReliabilityPolicy.BEST_EFFORT,
        durability=DurabilityPolicy.TRANSIENT_LOCAL if q.transient_local else DurabilityPolicy.VOLATILE,
    )


class _RclpySubscription(Subscription):
    def __init__(self, depth: int):
        self._queue: collections.deque = collections.deque(maxlen=max(depth, 1) * 4)
        self._lock = threading.Lock()
        self.incompatible = 0  # counted by the subscription's incompatible-QoS event callback

    def incompatible_writers(self) -> int:
        return self.incompatible

    def push(self, msg) -> None:
        with self._lock:
            self._queue.append((msg, time.monotonic()))

    def take(self):
        with self._lock:
            out = list(self._queue)
            self._queue.clear()
        return out


class _RclpyPublisher(Publisher):
    def __init__(self, pub):
        self.pub = pub

    def publish(self, msg) -> None:
        self.pub.publish(convert_to(msg, rclpy_class, _rclpy_float_seq, _rclpy_byte_seq))

    def matched(self) -> int:
        return int(self.pub.get_subscription_count())


class RclpyTransport(Transport):
    def __init__(self, node_name: str = "robot_rl_deploy", domain_id: int = 0, argv: list[str] | None = None):
        """A node `node_name` in DDS domain `domain_id`; ROS arguments come from `argv` (default: sys.orig_argv)."""
        try:
            import rclpy
            from rclpy.context import Context
            from rclpy.executors import SingleThreadedExecutor
        except ImportError:
            raise RuntimeError(
                "transport=rclpy needs ROS 2's rclpy (source /opt/ros/<distro>/setup.bash first); on a machine "
                "without ROS 2 use transport=dds, which speaks the same wire format"
            ) from None
        check_domain_env(domain_id)
        argv = list(sys.orig_argv if argv is None else argv)
        # sys.argv no longer holds the ROS arguments (ros_main hands Hydra the rest); sys.orig_argv does
        _, ros_args = split_ros_args(argv[1:])
        self._rclpy = rclpy
        self._context = Context()
        rclpy.init(args=argv[:1] + ros_args, context=self._context, domain_id=domain_id)
        self.node = rclpy.create_node(node_name, context=self._context)
        self._event = threading.Event()
        self._executor = SingleThreadedExecutor(context=self._context)
        self._executor.add_node(self.node)
        self._thread = threading.Thread(target=self._spin, name="rclpy-executor", daemon=True)
        self._thread.start()

    def _spin(self) -> None:
        try:
            self._executor.spin()
        except Exception:  # shutdown while spinning
            pass

    def subscribe(self, topic, msg_type, qos):
        check_topic_name(topic, "topic")
        sub = _RclpySubscription(qos.depth)

        def callback(m, sub=sub, cls=msg_type):
            sub.push(convert_from(m, cls))
            self._event.set()

        def incompatible(event, sub=sub):
            sub.incompatible = int(event.total_count)

        try:  # Humble and Jazzy have QoS events; without them the transport cannot tell
            from rclpy.qos_event import SubscriptionEventCallbacks

            events = {"event_callbacks": SubscriptionEventCallbacks(incompatible_qos=incompatible)}
        except ImportError:
            events, sub.incompatible = {}, -1
        self.node.create_subscription(rclpy_class(msg_type), topic, callback, to_rclpy_qos(qos), **events)
        return sub

    def publisher(self, topic, msg_type, qos):
        check_topic_name(topic, "topic")
        return _RclpyPublisher(self.node.create_publisher(rclpy_class(msg_type), topic, to_rclpy_qos(qos)))

    def wait(self, timeout_s: float) -> None:
        if timeout_s > 0:
            self._event.wait(timeout_s)
        self._event.clear()

    def wake(self) -> None:
        self._event.set()

    def close(self) -> None:
        self._executor.shutdown()
        self.node.destroy_node()
        if self._context.ok():
            self._rclpy.shutdown(context=self._context)
