"""The ROS 2 messages the deployment node speaks, as Cyclone DDS IDL structs with ROS 2's wire names.

A ROS 2 node on rmw_cyclonedds_cpp publishes `<pkg>/msg/<Type>` as the DDS type `<pkg>::msg::dds_::<Type>_`
(final, keyless, XCDR1). These dataclasses declare the same fields in the same order as the ROS 2 message
definitions (Humble and Jazzy agree on all of them), so their CDR bytes are the bytes a ROS 2 node sends;
tests/test_real_messages.py checks that against the `rosbags` serializer for every type here. The same
classes are the node's in-memory messages on every transport (the rclpy transport converts field by field).

Field names follow ROS: `Quaternion` is (x, y, z, w); MuJoCo's is (w, x, y, z).
"""

# No `from __future__ import annotations`: cyclonedds resolves the field annotations at runtime.
import time
from dataclasses import dataclass, field

import cyclonedds.idl.annotations as annotate
from cyclonedds.idl import IdlStruct
from cyclonedds.idl.types import float64, int32, sequence, uint8, uint32


@dataclass
@annotate.final
class Time(IdlStruct, typename="builtin_interfaces::msg::dds_::Time_"):
    sec: int32 = 0
    nanosec: uint32 = 0


@dataclass
@annotate.final
class Duration(IdlStruct, typename="builtin_interfaces::msg::dds_::Duration_"):
    sec: int32 = 0
    nanosec: uint32 = 0


@dataclass
@annotate.final
class Header(IdlStruct, typename="std_msgs::msg::dds_::Header_"):
    stamp: Time = field(default_factory=Time)
    frame_id: str = ""


@dataclass
@annotate.final
class Bool(IdlStruct, typename="std_msgs::msg::dds_::Bool_"):
    data: bool = False


@dataclass
@annotate.final
class Empty(IdlStruct, typename="std_msgs::msg::dds_::Empty_"):
    # rosidl gives every empty message this one placeholder member
    structure_needs_at_least_one_member: uint8 = 0


@dataclass
@annotate.final
class String(IdlStruct, typename="std_msgs::msg::dds_::String_"):
    data: str = ""


@dataclass
@annotate.final
class MultiArrayDimension(IdlStruct, typename="std_msgs::msg::dds_::MultiArrayDimension_"):
    label: str = ""
    size: uint32 = 0
    stride: uint32 = 0


@dataclass
@annotate.final
class MultiArrayLayout(IdlStruct, typename="std_msgs::msg::dds_::MultiArrayLayout_"):
    dim: sequence[MultiArrayDimension] = field(default_factory=list)
    data_offset: uint32 = 0


@dataclass
@annotate.final
class Float64MultiArray(IdlStruct, typename="std_msgs::msg::dds_::Float64MultiArray_"):
    layout: MultiArrayLayout = field(default_factory=MultiArrayLayout)
    data: sequence[float64] = field(default_factory=list)


@dataclass
@annotate.final
class JointState(IdlStruct, typename="sensor_msgs::msg::dds_::JointState_"):
    header: Header = field(default_factory=Header)
    name: sequence[str] = field(default_factory=list)
    position: sequence[float64] = field(default_factory=list)
    velocity: sequence[float64] = field(default_factory=list)
    effort: sequence[float64] = field(default_factory=list)


@dataclass
@annotate.final
class Image(IdlStruct, typename="sensor_msgs::msg::dds_::Image_"):
    header: Header = field(default_factory=Header)
    height: uint32 = 0
    width: uint32 = 0
    encoding: str = ""
    is_bigendian: uint8 = 0
    step: uint32 = 0
    # uint8[]: cyclonedds (de)serializes it as a list of ints, ~50 ns a byte: keep camera images small
    data: sequence[uint8] = field(default_factory=list)


@dataclass
@annotate.final
class JointTrajectoryPoint(IdlStruct, typename="trajectory_msgs::msg::dds_::JointTrajectoryPoint_"):
    positions: sequence[float64] = field(default_factory=list)
    velocities: sequence[float64] = field(default_factory=list)
    accelerations: sequence[float64] = field(default_factory=list)
    effort: sequence[float64] = field(default_factory=list)
    time_from_start: Duration = field(default_factory=Duration)


@dataclass
@annotate.final
class JointTrajectory(IdlStruct, typename="trajectory_msgs::msg::dds_::JointTrajectory_"):
    header: Header = field(default_factory=Header)
    joint_names: sequence[str] = field(default_factory=list)
    points: sequence[JointTrajectoryPoint] = field(default_factory=list)


@dataclass
@annotate.final
class Point(IdlStruct, typename="geometry_msgs::msg::dds_::Point_"):
    x: float64 = 0.0
    y: float64 = 0.0
    z: float64 = 0.0


@dataclass
@annotate.final
class Quaternion(IdlStruct, typename="geometry_msgs::msg::dds_::Quaternion_"):
    x: float64 = 0.0
    y: float64 = 0.0
    z: float64 = 0.0
    w: float64 = 1.0


@dataclass
@annotate.final
class Pose(IdlStruct, typename="geometry_msgs::msg::dds_::Pose_"):
    position: Point = field(default_factory=Point)
    orientation: Quaternion = field(default_factory=Quaternion)


@dataclass
@annotate.final
class PoseStamped(IdlStruct, typename="geometry_msgs::msg::dds_::PoseStamped_"):
    header: Header = field(default_factory=Header)
    pose: Pose = field(default_factory=Pose)


# Every message the node publishes or subscribes to (the golden tests walk this tuple).
TOPIC_TYPES = (
    JointState, Float64MultiArray, JointTrajectory, Bool, Empty, String, PoseStamped, Image,
)
ALL_TYPES = (
    Time, Duration, Header, Bool, Empty, String, MultiArrayDimension, MultiArrayLayout, Float64MultiArray,
    JointState, Image, JointTrajectoryPoint, JointTrajectory, Point, Quaternion, Pose, PoseStamped,
)


def ros_type_name(cls) -> str:
    """'sensor_msgs/msg/JointState' for the DDS type 'sensor_msgs::msg::dds_::JointState_'."""
    pkg, sub, _, name = cls.__idl_typename__.split("::")
    return f"{pkg}/{sub}/{name[:-1]}"


def dds_type_name(cls) -> str:
    return cls.__idl_typename__


BY_ROS_NAME = {ros_type_name(c): c for c in ALL_TYPES}


def now_stamp() -> Time:
    """Wall-clock time as a ROS stamp (what a ROS 2 node on system time puts in header.stamp)."""
    ns = time.time_ns()
    return Time(sec=ns // 1_000_000_000, nanosec=ns % 1_000_000_000)


def stamp_ns(t: Time) -> int:
    return int(t.sec) * 1_000_000_000 + int(t.nanosec)


def duration(seconds: float) -> Duration:
    ns = max(0, int(round(seconds * 1e9)))
    return Duration(sec=ns // 1_000_000_000, nanosec=ns % 1_000_000_000)


def float_array(values, label: str = "") -> Float64MultiArray:
    """A Float64MultiArray with a one-dimensional layout (label, size, stride = len)."""
    data = [float(v) for v in values]
    dim = [MultiArrayDimension(label=label, size=len(data), stride=len(data))] if label else []
    return Float64MultiArray(layout=MultiArrayLayout(dim=dim, data_offset=0), data=data)
