"""The rclpy transport: the control node as a ROS 2 node on a host with ROS 2 (Humble, Jazzy) installed.

Subscriptions are served by a single-threaded executor in a background thread; callbacks convert the
rclpy message into the IDL dataclass of real/messages.py (field by field; the names are the ROS names)
and queue it with its receipt time. Publishing converts back (real/message_convert.py, tested against the
`rosbags` message classes since rclpy is not installable from the registries CI reaches).
"""

from __future__ import annotations

import array
import collections
import importlib
import threading
import time

from real.message_convert import convert_from, convert_to
from real.messages import ros_type_name
from real.qos import QosProfile
from real.transport import Publisher, Subscription, Transport, check_topic_name

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
    def __init__(self, node_name: str = "robot_rl_deploy"):
        try:
            import rclpy
            from rclpy.executors import SingleThreadedExecutor
        except ImportError:
            raise RuntimeError(
                "transport=rclpy needs ROS 2's rclpy (source /opt/ros/<distro>/setup.bash first); on a machine "
                "without ROS 2 use transport=dds, which speaks the same wire format"
            ) from None
        if not rclpy.ok():
            rclpy.init()
        self._rclpy = rclpy
        self.node = rclpy.create_node(node_name)
        self._event = threading.Event()
        self._executor = SingleThreadedExecutor()
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
        if self._rclpy.ok():
            self._rclpy.shutdown()
