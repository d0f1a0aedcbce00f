"""The DDS transport: Cyclone DDS (PyPI wheel) speaking ROS 2's wire format, no ROS installation needed.

ROS 2 topic "/joint_states" is the DDS topic "rt/joint_states"; types carry ROS 2's DDS names (see
real/messages.py); data representation is pinned to XCDR1 as rmw_cyclonedds_cpp uses. Each
subscription's reader has a ReadCondition on one WaitSet, which also holds a GuardCondition for
wake(), so `wait()` returns as soon as anything arrives.
"""

from __future__ import annotations

import threading
import time

from cyclonedds.core import GuardCondition, InstanceState, Policy, Qos, ReadCondition, SampleState, ViewState, WaitSet
from cyclonedds.domain import Domain, DomainParticipant
from cyclonedds.pub import DataWriter
from cyclonedds.sub import DataReader
from cyclonedds.topic import Topic
from cyclonedds.util import duration

from real.cyclonedds_config import loopback_xml
from real.qos import QosProfile
from real.transport import Publisher, Subscription, Transport, check_topic_name

# A process has one Cyclone domain per id; its configuration is fixed when the first participant joins.
_DOMAINS: dict[int, tuple[Domain | None, bool]] = {}
_DOMAINS_LOCK = threading.Lock()
MAX_DOMAIN_ID = 232  # DDS port mapping: 7400 + 250 * domain_id must stay below 65536


def dds_topic_name(ros_topic: str) -> str:
    return "rt" + ros_topic


def to_dds_qos(q: QosProfile) -> Qos:
    rel = Policy.Reliability.Reliable(duration(milliseconds=100)) if q.reliable else Policy.Reliability.BestEffort
    dur = Policy.Durability.TransientLocal if q.transient_local else Policy.Durability.Volatile
    return Qos(rel, dur, Policy.History.KeepLast(q.depth),
               Policy.DataRepresentation(use_cdrv0_representation=True))


def _join_domain(domain_id: int, loopback: bool, realtime_priority: int) -> None:
    with _DOMAINS_LOCK:
        if domain_id in _DOMAINS:
            if _DOMAINS[domain_id][1] != loopback:
                raise ValueError(
                    f"DDS domain {domain_id} is already configured with loopback={_DOMAINS[domain_id][1]} in this "
                    "process; use one setting per domain"
                )
            return
        dom = None
        if loopback:
            try:
                dom = Domain(domain_id, loopback_xml(realtime_priority=realtime_priority))
            except Exception:  # noqa: BLE001 - no permission for real-time threads: plain loopback
                if realtime_priority <= 0:
                    raise
                dom = Domain(domain_id, loopback_xml())
        _DOMAINS[domain_id] = (dom, loopback)


class _DdsSubscription(Subscription):
    def __init__(self, reader: DataReader, msg_type: type):
        self.reader, self.msg_type = reader, msg_type

    def take(self):
        out = []
        while True:
            batch = self.reader.take(64)
            if not batch:
                return out
            now = time.monotonic()
            # Instance-state changes (a writer left) arrive as InvalidSample objects: not messages.
            out.extend((s, now) for s in batch if isinstance(s, self.msg_type))

    def incompatible_writers(self) -> int:
        return int(self.reader.get_requested_incompatible_qos_status().total_count)


class _DdsPublisher(Publisher):
    def __init__(self, writer: DataWriter):
        self.writer = writer

    def publish(self, msg) -> None:
        self.writer.write(msg)

    def matched(self) -> int:
        return len(self.writer.get_matched_subscriptions())


class DdsTransport(Transport):
    def __init__(self, domain_id: int = 0, loopback: bool = False, realtime_priority: int = 0):
        if not (isinstance(domain_id, int) and 0 <= domain_id <= MAX_DOMAIN_ID):
            raise ValueError(f"DDS domain_id={domain_id!r} must be a whole number in [0, {MAX_DOMAIN_ID}]")
        _join_domain(domain_id, loopback, realtime_priority)
        self.domain_id = domain_id
        self.participant = DomainParticipant(domain_id)
        self.waitset = WaitSet(self.participant)
        self.guard = GuardCondition(self.participant)
        self.waitset.attach(self.guard)
        self._topics: dict[str, Topic] = {}
        self._keep: list = []  # readers, writers and conditions live as long as the transport

    def _topic(self, name: str, msg_type: type) -> Topic:
        check_topic_name(name, "topic")
        t = self._topics.get(name)
        if t is None:
            t = self._topics[name] = Topic(self.participant, dds_topic_name(name), msg_type)
        elif t.data_type is not msg_type:
            raise ValueError(f"topic {name} is used with two types: {t.data_type.__name__} and {msg_type.__name__}")
        return t

    def subscribe(self, topic, msg_type, qos):
        reader = DataReader(self.participant, self._topic(topic, msg_type), qos=to_dds_qos(qos))
        cond = ReadCondition(reader, SampleState.Any | ViewState.Any | InstanceState.Any)
        self.waitset.attach(cond)
        self._keep += [reader, cond]
        return _DdsSubscription(reader, msg_type)

    def publisher(self, topic, msg_type, qos):
        writer = DataWriter(self.participant, self._topic(topic, msg_type), qos=to_dds_qos(qos))
        self._keep.append(writer)
        return _DdsPublisher(writer)

    def wait(self, timeout_s: float) -> None:
        if timeout_s > 0:
            self.waitset.wait(duration(seconds=timeout_s))
        self.guard.set(False)

    def wake(self) -> None:
        self.guard.set(True)

    def close(self) -> None:
        self._keep.clear()
        self._topics.clear()
