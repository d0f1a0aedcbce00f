"""The DDS transport's messages are ROS 2's on the wire: golden CDR bytes against the rosbags serializer.

For every message type the node uses, the same message is built in our IDL classes (real/messages.py) and
in rosbags' ROS 2 type stores (Humble and Jazzy); Cyclone DDS's serialization must equal rosbags' CDR byte
for byte (4-byte encapsulation header included), and each side must read the other's bytes back.
"""

from __future__ import annotations

import numpy as np
import pytest
from rosbags.typesys import Stores, get_typestore

from robot_rl.real import messages as M
from robot_rl.real.message_convert import convert_from, convert_to, rosbags_byte_seq, rosbags_float_seq, to_rosbags

STORES = [Stores.ROS2_HUMBLE, Stores.ROS2_JAZZY]

STAMP = M.Time(sec=1_700_000_123, nanosec=456_789)
HEADER = M.Header(stamp=STAMP, frame_id="world")

# One message per type with every field non-default (odd string lengths exercise CDR alignment padding).
SAMPLES = {
    M.JointState: M.JointState(
        header=HEADER, name=["joint1", "joint2", "finger_left"], position=[0.1, -1.5, 0.04],
        velocity=[0.0, 2.5, -0.01], effort=[1.0, -2.0, 3.5],
    ),
    M.Float64MultiArray: M.Float64MultiArray(
        layout=M.MultiArrayLayout(dim=[M.MultiArrayDimension(label="joints", size=3, stride=3)], data_offset=0),
        data=[0.25, -0.5, 1e-9],
    ),
    M.JointTrajectory: M.JointTrajectory(
        header=HEADER, joint_names=["joint1", "j2"],
        points=[
            M.JointTrajectoryPoint(positions=[0.1, 0.2], velocities=[0.0, 0.1], accelerations=[], effort=[],
                                   time_from_start=M.Duration(sec=0, nanosec=10_000_000)),
            M.JointTrajectoryPoint(positions=[0.3, 0.4], velocities=[], accelerations=[1.0, 2.0], effort=[5.0, 6.0],
                                   time_from_start=M.Duration(sec=1, nanosec=5)),
        ],
    ),
    M.Bool: M.Bool(data=True),
    M.Empty: M.Empty(),
    M.String: M.String(data='{"event": "start", "index": 3}'),
    M.PoseStamped: M.PoseStamped(
        header=HEADER, pose=M.Pose(position=M.Point(0.45, -0.1, 0.02), orientation=M.Quaternion(0.0, 0.0, 0.3826834, 0.9238795)),
    ),
    M.Image: M.Image(header=HEADER, height=2, width=3, encoding="rgb8", is_bigendian=0, step=9,
                     data=list(range(0, 180, 10))),
}


def test_every_topic_type_has_a_golden_sample():
    assert set(SAMPLES) == set(M.TOPIC_TYPES)


@pytest.mark.parametrize("store", STORES, ids=lambda s: s.value)
@pytest.mark.parametrize("cls", M.TOPIC_TYPES, ids=lambda c: c.__name__)
def test_cdr_bytes_equal_the_ros2_serializer(cls, store):
    ts = get_typestore(store)
    ours = SAMPLES[cls]
    theirs = to_rosbags(ours, ts)
    golden = bytes(ts.serialize_cdr(theirs, M.ros_type_name(cls)))
    assert golden[:4] == b"\x00\x01\x00\x00"  # XCDR1 (plain CDR), little endian: what rmw_cyclonedds_cpp sends
    assert ours.serialize() == golden
    assert cls.deserialize(golden) == ours
    back = ts.deserialize_cdr(ours.serialize(), M.ros_type_name(cls))
    assert convert_from(back, cls) == ours


@pytest.mark.parametrize("cls", M.ALL_TYPES, ids=lambda c: c.__name__)
def test_dds_type_names_follow_rmw_cyclonedds(cls):
    pkg, sub, dds, name = M.dds_type_name(cls).split("::")
    assert (sub, dds) == ("msg", "dds_") and name == cls.__name__ + "_"
    assert M.ros_type_name(cls) in get_typestore(Stores.ROS2_HUMBLE).types


def test_empty_sequences_and_strings_serialize_like_ros2():
    ts = get_typestore(Stores.ROS2_HUMBLE)
    for msg in (M.JointState(), M.JointTrajectory(), M.Float64MultiArray(), M.String(), M.Image()):
        golden = bytes(ts.serialize_cdr(to_rosbags(msg, ts), M.ros_type_name(type(msg))))
        assert msg.serialize() == golden, type(msg).__name__


def test_rclpy_style_conversion_round_trips_through_another_implementation():
    # the rclpy transport converts with the same functions; rosbags' classes stand in for rclpy's
    ts = get_typestore(Stores.ROS2_JAZZY)
    for cls, msg in SAMPLES.items():
        other = convert_to(msg, lambda c: ts.types[M.ros_type_name(c)], rosbags_float_seq, rosbags_byte_seq)
        assert type(other).__name__.endswith(cls.__name__)
        assert convert_from(other, cls) == msg


def test_helpers_build_ros_conventions():
    a = M.float_array(np.array([1.0, 2.0]), label="teleop")
    assert a.data == [1.0, 2.0] and a.layout.dim[0].label == "teleop" and a.layout.dim[0].size == 2
    assert M.float_array([3.0]).layout.dim == []  # commands: empty layout, as ros2 topic pub sends
    d = M.duration(1.25)
    assert (d.sec, d.nanosec) == (1, 250_000_000)
    assert M.stamp_ns(M.Time(2, 5)) == 2_000_000_005
