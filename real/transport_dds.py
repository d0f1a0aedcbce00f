"""The DDS transport: Cyclone DDS (PyPI wheel) speaking ROS 2's wire format, no ROS installation needed.

ROS 2 topic "/joint_states" is the DDS topic "rt/joint_states"; types carry ROS 2's DDS names (see
real/messages.py); data representation is pinned to XCDR1 as rmw_cyclonedds_cpp uses. Each
subscription's reader has a ReadCondition on one WaitSet, which also holds a GuardCondition for
wake(), so `wait()` returns as soon as anything arrives.
"""

from __future__ import annotations

import os
import threading
import time

from cyclonedds.core import GuardCondition, InstanceState, Policy, Qos, ReadCondition, SampleState, ViewState, WaitSet
from cyclonedds.domain import Domain, DomainParticipant
from cyclonedds.pub import DataWriter
from cyclonedds.sub import DataReader
from cyclonedds.topic import Topic
from cyclonedds.util import duration

from robot_rl.real.cyclonedds_config import has_dds_security, loopback_xml, security_xml
from robot_rl.real.loopback_sockets import restrict_to_loopback
from robot_rl.real.qos import QosProfile
from robot_rl.real.transport import Publisher, Subscription, Transport, check_topic_name

# A process has one Cyclone domain per id; its configuration is fixed when the first participant joins.
_DOMAINS: dict[int, tuple[Domain | None, tuple]] = {}  # id -> (domain, (loopback, security))
_DOMAINS_LOCK = threading.Lock()
MAX_DOMAIN_ID = 232  # DDS port mapping: 7400 + 250 * domain_id must stay below 65536


def domain_ports(domain_id: int) -> range:
    """The UDP ports DDSI assigns to a domain's participants (port base 7400, domain gain 250)."""
    return range(7400 + 250 * domain_id, 7400 + 250 * (domain_id + 1))


def dds_topic_name(ros_topic: str) -> str:
    return "rt" + ros_topic


def to_dds_qos(q: QosProfile) -> Qos:
    rel = Policy.Reliability.Reliable(duration(milliseconds=100)) if q.reliable else Policy.Reliability.BestEffort
    dur = Policy.Durability.TransientLocal if q.transient_local else Policy.Durability.Volatile
    return Qos(rel, dur, Policy.History.KeepLast(q.depth),
               Policy.DataRepresentation(use_cdrv0_representation=True))


NO_SECURITY = (
    "deploy.dds_security needs a Cyclone DDS built with DDS Security, and the one Python loads has none (the PyPI "
    "cyclonedds wheel is built without it); build Cyclone DDS 11.0.1 with -DENABLE_SECURITY=ON (OpenSSL) and install "
    "the Python binding against it (CYCLONEDDS_HOME=<its prefix> pip install --no-binary cyclonedds cyclonedds==11.0.1), "
    "or use transport=rclpy with SROS2 (docs/security.md)"
)


def _join_domain(domain_id: int, loopback: bool, realtime_priority: int, security: dict[str, str] | None) -> None:
    setting = (loopback, tuple(sorted(security.items())) if security else None)
    with _DOMAINS_LOCK:
        if domain_id in _DOMAINS:
            if _DOMAINS[domain_id][1] != setting:
                raise ValueError(
                    f"DDS domain {domain_id} is already configured with loopback={_DOMAINS[domain_id][1][0]} and "
                    f"{'this' if _DOMAINS[domain_id][1][1] else 'no'} DDS Security in this process; use one setting "
                    "per domain"
                )
            return
        if security and not has_dds_security():
            raise RuntimeError(NO_SECURITY)
        # Cyclone reads a configuration as comma-separated XML fragments, later ones adding to earlier ones; without
        # loopback the user's CYCLONEDDS_URI (the network setup) stays in force
        base = [] if loopback or not os.environ.get("CYCLONEDDS_URI") else [os.environ["CYCLONEDDS_URI"]]
        extra = [security_xml(**security)] if security else []
        dom = None
        try:
            if loopback:
                try:
                    dom = Domain(domain_id, ",".join([loopback_xml(realtime_priority=realtime_priority), *extra]))
                except Exception:  # noqa: BLE001 - no permission for real-time threads: plain loopback
                    if realtime_priority <= 0:
                        raise
                    dom = Domain(domain_id, ",".join([loopback_xml(), *extra]))
            elif extra:
                dom = Domain(domain_id, ",".join(base + extra))
        except Exception as e:  # noqa: BLE001 - Cyclone printed its reason; one line naming the setting
            raise RuntimeError(
                f"Cyclone DDS refused the configuration of domain {domain_id}"
                + (" (DDS Security: check the deploy.dds_security files; Cyclone's reason is printed above)" if security else "")
                + f": {e}"
            ) from None
        if loopback:
            # Cyclone bound its receive sockets to 0.0.0.0 (it cannot bind them to 127.0.0.1): a kernel filter drops
            # what is not addressed to 127.0.0.1 before Cyclone reads it (real/loopback_sockets.py)
            if not restrict_to_loopback(domain_ports(domain_id)):
                raise RuntimeError(f"found no Cyclone DDS receive socket of domain {domain_id} to pin to loopback")
        _DOMAINS[domain_id] = (dom, setting)


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
    def __init__(self, domain_id: int = 0, loopback: bool = False, realtime_priority: int = 0,
                 security: dict[str, str] | None = None):
        """A participant in `domain_id`; `security`: the six DDS Security files (DdsSecurity.files()), None: off."""
        if not (isinstance(domain_id, int) and 0 <= domain_id <= MAX_DOMAIN_ID):
            raise ValueError(f"DDS domain_id={domain_id!r} must be a whole number in [0, {MAX_DOMAIN_ID}]")
        _join_domain(domain_id, loopback, realtime_priority, security)
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
