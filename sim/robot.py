"""Our 7-DoF Franka-Panda-like arm with a parallel-jaw gripper, built from primitive geoms.

Kinematics and joint limits follow the Panda's published values (link offsets 0.333 / 0.316 / 0.0825 /
0.384 / 0.088 / 0.107 m). Every arm joint sits at its body's origin and turns about the body's z axis,
so the frame sensors `link<i>_pos` / `link<i>_axis` give the joint anchors and axes that the
differential IK needs, on both backends, with no backend-specific code.

Collisions are explicit `<pair>`s (all geoms have contype = conaffinity = 0): the arm never collides,
only the finger pads and finger bodies meet the table and the task objects. This keeps MJX's static
collision list short.
"""

from __future__ import annotations

import numpy as np

ARM_JOINTS = tuple(f"joint{i}" for i in range(1, 8))
FINGER_JOINTS = ("finger_left", "finger_right")
N_ARM = 7
# Published Panda joint limits (rad).
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
FINGER_KP = 400.0
FINGER_FORCE = 40.0
# Finger damping (N s / m). Known limit: at full close command the fingers move ~1 cm per physics step and
# can tunnel through a 30 mm peg; the peg expert closes gradually. Slower fingers need a retuned peg expert.
FINGER_DAMPING = 5.0

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
    return xml


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
        # grip_site: the point between the finger pads, z along the approach direction.
        "<site name='grip_site' pos='0 0 0.0964' size='0.006' rgba='1 0 0 0.5'/>"
        # wrist camera: beside the hand (off its thin x side), aimed along the approach axis at a point 8 cm
        # past the fingertips, image x along the closing direction, so both fingers and the object show.
        "<camera name='wrist' pos='0.055 0 0.03' xyaxes='0 1 0 0.939 0 0.344' fovy='70'/>"
        "<body name='finger_left' pos='0 0 0.0584' gravcomp='1'>"
        "<joint name='finger_left' class='finger'/>"
        + finger.format(side="left", y="0.006", pady="-0.0005")
        + "</body>"
        "<body name='finger_right' pos='0 0 0.0584' quat='0 0 0 1' gravcomp='1'>"
        "<joint name='finger_right' class='finger'/>"
        + finger.format(side="right", y="0.006", pady="-0.0005")
        + "</body></body>"
    )


def _actuators_xml() -> str:
    xml = ""
    for i in range(N_ARM):
        xml += (
            f"<position name='act{i + 1}' joint='joint{i + 1}' kp='{ARM_KP[i]}' kv='{ARM_KV[i]}' "
            f"ctrlrange='{ARM_LOWER[i]} {ARM_UPPER[i]}'/>"
        )
    for side in ("left", "right"):
        xml += (
            f"<position name='act_finger_{side}' joint='finger_{side}' kp='{FINGER_KP}' "
            f"ctrlrange='0 {FINGER_MAX}' forcerange='-{FINGER_FORCE} {FINGER_FORCE}'/>"
        )
    return xml


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


GRIPPER_PAD_GEOMS = ("left_pad", "right_pad")
GRIPPER_BODY_GEOMS = ("left_finger", "right_finger", "hand")


def build_scene_xml(
    *,
    objects_xml: str,
    sensors_xml: str = "",
    pairs_xml: str = "",
    timestep: float = 0.005,
    solver_iterations: int = 4,
    ls_iterations: int = 8,
    assets_xml: str = "",
) -> str:
    """MJCF of the robot on a table plus a task's objects, sensors and contact pairs."""
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
    <default class='arm'><joint axis='0 0 1' damping='1' armature='0.1'/></default>
    <default class='finger'><joint type='slide' axis='0 1 0' range='0 {FINGER_MAX}' damping='{FINGER_DAMPING}' armature='0.01'/></default>
    <default class='visual'><geom group='1' density='0'/></default>
    <default class='collision'><geom group='3' rgba='0.5 0.5 0.9 0.3'/></default>
    <default class='pad'><geom group='3' friction='1.5 0.005 0.0001' rgba='0.9 0.3 0.3 1'/></default>
    <default class='object'><geom group='2' friction='1 0.005 0.0001'/></default>
  </default>
  <asset>
    <texture name='grid' type='2d' builtin='checker' rgb1='0.55 0.45 0.35' rgb2='0.5 0.4 0.3' width='256' height='256'/>
    <material name='table' texture='grid' texrepeat='8 8' reflectance='0.05'/>
    <material name='arm_white' rgba='0.95 0.95 0.95 1'/>
    <material name='arm_grey' rgba='0.3 0.3 0.32 1'/>
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
    <body name='link0' pos='0 0 0'>
      <geom type='cylinder' size='0.07 0.07' pos='0 0 0.07' mass='0' class='visual' material='arm_white'/>
      <geom type='capsule' fromto='0 0 0.1 0 0 0.143' size='0.06' mass='0' class='visual' material='arm_grey'/>
      {_arm_xml()}
    </body>
    {objects_xml}
  </worldbody>
  <contact>{pairs_xml}</contact>
  <actuator>{_actuators_xml()}</actuator>
  <sensor>{_robot_sensors_xml()}{sensors_xml}</sensor>
</mujoco>
"""


def pad_pairs_xml(geom: str, condim: int = 4) -> str:
    """Contact pairs between one object geom and both finger pads and finger bodies."""
    xml = "".join(f"<pair geom1='{geom}' geom2='{p}' condim='{condim}'/>" for p in GRIPPER_PAD_GEOMS)
    xml += "".join(f"<pair geom1='{geom}' geom2='{f}' condim='3'/>" for f in ("left_finger", "right_finger"))
    return xml


def table_pairs_xml() -> str:
    """The fingers stop at the table instead of passing through it."""
    return "".join(f"<pair geom1='table' geom2='{f}' condim='3'/>" for f in ("left_finger", "right_finger"))
