"""The robots an env can use (EnvConfig.robot), and the scene MJCF: a robot on a table plus a task's objects.

A robot is one description, `Robot`: where its MJCF comes from, its arm joints (any count, in wire order), its
gripper (the joints its servos drive and what grip commands -1 / +1 mean for them), the end-effector site, the home
posture, the servo gains, the arm's joint limits and the deploy node's limits file. Every layer reads the robot from
here: the scene and its sensors, actions and their IK, observations, the experts (through observation fields), the
deploy node, the sim driver and rosbag import. A robot registers from outside the package like a task does
(entry-point group "robot_rl.robots"; docs/own_robot.md).

  primitive        our Panda-like arm built from capsules and boxes (the default: the faster one)
  panda_menagerie  MuJoCo Menagerie's Franka Emika Panda, meshes and inertias, installed from a PyPI wheel at
                   install time (sim/menagerie.py)

The differential IK needs each arm joint's anchor and axis: every arm joint must sit at its body's origin and turn
about one of the body's axes (either sign; checked when the scene is built), so frame sensors on the joint's body
give both, on both backends, with no backend-specific code (sensors `anchor_<joint>` / `axis_<joint>`).

Collisions are explicit `<pair>`s (all geoms have contype = conaffinity = 0): the arm never collides, only the
finger pads and finger bodies meet the table and the task objects. This keeps MJX's static collision list short.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import numpy as np

from robot_rl.sim.registry import Registry

# ---- the Pandas' description (both Panda robots below) ------------------------------------------------------------
ARM_JOINTS = tuple(f"joint{i}" for i in range(1, 8))
FINGER_JOINTS = ("finger_left", "finger_right")
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
    tendon: str = ""  # <tendon> children (the 2F-85's servo drives both of its fingers through one)


@dataclasses.dataclass(frozen=True)
class Gripper:
    """A gripper driven by position servos, one per joint in `joints` (or one on `tendon`), all with the same
    target: the action's grip entry g in [-1, 1] sets it to closed + (g + 1) / 2 * (open - closed)."""

    joints: tuple[str, ...] = FINGER_JOINTS  # the joints commanded on the wire, in order after the arm's
    open: float = FINGER_MAX  # joint target of grip +1 (fully open): rad or m, the joints' unit
    closed: float = 0.0  # joint target of grip -1 (fully closed)
    kp: float = FINGER_KP  # servo stiffness (N/m or N m/rad)
    kv: float = 0.0  # servo damping (N s/m or N m s/rad; 0: none)
    force: float = FINGER_FORCE  # force limit of each servo (N or N m)
    # one servo on this tendon of the MJCF instead of one per joint (a linkage whose fingers a tendon couples); its
    # length is in the joints' unit
    tendon: str | None = None
    # the width between the finger pads' inner faces: sliding fingers (pad_thickness None): the joints' sum +
    # pad_gap (m, the width with every joint at 0); a linkage: the distance of the pad sites less pad_thickness (m)
    pad_gap: float = 0.0
    pad_thickness: float | None = None
    finger_travel: float = 1.0  # m each finger moves per unit of joint motion (sliding fingers: 1), about
    # m/s each finger closes at most, the maker's figure (None: not limited): the scripted experts never close faster,
    # so their demonstrations keep a real gripper's timing (its deploy limits file says the same in joint units)
    max_speed: float | None = None

    @property
    def n_servos(self) -> int:
        return 1 if self.tendon else len(self.joints)

    def target(self, xp, grip):
        """Joint target [...] of grip commands [...] in [-1, 1]."""
        return self.closed + 0.5 * (grip + 1.0) * (self.open - self.closed)

    def grip(self, xp, target):
        """The grip command [...] in [-1, 1] whose joint target is `target` [...] (target's inverse)."""
        return xp.clip(2.0 * (target - self.closed) / (self.open - self.closed) - 1.0, -1.0, 1.0)

    @property
    def ctrl_range(self) -> tuple[float, float]:
        return min(self.open, self.closed), max(self.open, self.closed)


@dataclasses.dataclass(frozen=True)
class Robot:
    """A robot an env can use: its MJCF and everything code needs beyond it (the module docstring)."""

    name: str
    # rad [n_arm]: reset posture (gripper pointing down at about (0.45, 0, 0.25) m) and the IK's null-space target
    home_qpos: np.ndarray
    mjcf: Callable[[], RobotMJCF]  # builds the robot's MJCF pieces (may read installed files: call when building)
    arm_joints: tuple[str, ...] = ARM_JOINTS  # the arm's joints, base to hand: action, observation and wire order
    arm_lower: np.ndarray = dataclasses.field(default_factory=lambda: ARM_LOWER.copy())  # rad, the maker's limits
    arm_upper: np.ndarray = dataclasses.field(default_factory=lambda: ARM_UPPER.copy())
    arm_kp: tuple[float, ...] = ARM_KP  # position servo gains (N m / rad), one per arm joint
    arm_kv: tuple[float, ...] = ARM_KV  # and their implicit damping (N m s / rad)
    gripper: Gripper = Gripper()
    ee_site: str = "grip_site"  # the site between the finger pads: the end effector the IK and observations use
    # the deploy node's joint limits (configs/deploy/limits/<name>.yaml: position, velocity, step, acceleration)
    deploy_limits: str = "panda"

    @property
    def n_arm(self) -> int:
        return len(self.arm_joints)

    @property
    def joints(self) -> tuple[str, ...]:
        """Every commanded joint, the arm's then the gripper's: the order of commands and joint states on the wire."""
        return (*self.arm_joints, *self.gripper.joints)

    def problems(self) -> list[str]:
        """What is wrong with the description itself (sizes, ranges), each naming the field."""
        n, out = self.n_arm, []
        for k in ("home_qpos", "arm_lower", "arm_upper", "arm_kp", "arm_kv"):
            if np.shape(getattr(self, k)) != (n,):
                out.append(f"robot {self.name}: {k} has {np.size(getattr(self, k))} values for {n} arm joints")
        if not out and not (np.asarray(self.arm_lower) < np.asarray(self.arm_upper)).all():
            out.append(f"robot {self.name}: arm_lower must be below arm_upper for every joint")
        if not out and not ((self.home_qpos >= self.arm_lower) & (self.home_qpos <= self.arm_upper)).all():
            out.append(f"robot {self.name}: home_qpos lies outside [arm_lower, arm_upper]")
        if self.gripper.open == self.gripper.closed:
            out.append(f"robot {self.name}: gripper.open and gripper.closed must differ")
        if not self.gripper.joints:
            out.append(f"robot {self.name}: gripper.joints is empty")
        return out


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
    xml += primitive_hand_xml()
    xml += "</body>" * len(_LINKS)
    return (
        "<body name='link0' pos='0 0 0'>"
        "<geom type='cylinder' size='0.07 0.07' pos='0 0 0.07' mass='0.63' class='visual' material='arm_white'/>"
        "<geom type='capsule' fromto='0 0 0.1 0 0 0.143' size='0.06' mass='0' class='visual' material='arm_grey'/>"
        + xml + "</body>"
    )


def primitive_hand_xml(pos: str = "0 0 0.107", quat: str = "0.9238795 0 0 -0.3826834") -> str:
    """The primitive arm's parallel hand (body `hand`; finger joints finger_left / finger_right, Gripper()'s; pads,
    grip_site and wrist camera), at `pos` / `quat` in its parent's frame, its z axis the approach direction: a hand
    any arm of primitives can mount on its flange (PRIMITIVE_DEFAULTS / PRIMITIVE_ASSETS hold its classes and
    materials). On the Panda it sits 0.107 m past link7, turned -45 deg about z; fingers close along its y axis."""
    finger = (
        "<geom type='box' pos='0 {y} 0.024' size='0.011 0.006 0.024' mass='0.015' class='visual' material='arm_grey'/>"
        "<geom name='{side}_finger' type='box' pos='0 {y} 0.024' size='0.011 0.006 0.024' mass='0' class='collision'/>"
        "<geom name='{side}_pad' type='box' pos='0 {pady} 0.038' size='0.010 0.002 0.010' mass='0' class='pad'/>"
        "<site name='{side}_pad' pos='0 {pady} 0.038' size='0.004'/>"
    )
    return (
        f"<body name='hand' pos='{pos}' quat='{quat}' gravcomp='1'>"
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


def actuator_name(robot: Robot, joint: str) -> str:
    """The name of the servo that drives `joint` (an arm or gripper joint) in the scene (actuators_xml)."""
    return "act_gripper" if robot.gripper.tendon and joint in robot.gripper.joints else f"act_{joint}"


def ctrl_index(robot: Robot, joint: str) -> int:
    """Where `joint`'s servo target sits in ctrl (actuators_xml's order: the arm's servos, then the gripper's)."""
    g = robot.gripper
    if joint in robot.arm_joints:
        return robot.arm_joints.index(joint)
    return robot.n_arm + (0 if g.tendon else g.joints.index(joint))


def actuators_xml(robot: Robot) -> str:
    """One position servo per arm joint (ctrl: joint target, rad; the robot's gains), then the gripper's force-limited
    position servos, one per gripper joint or one on its tendon (ctrl: the joints' target). Both Pandas share them:
    the same action moves either alike (docs/results/panda.md)."""
    arm = "".join(
        f"<position name='act_{j}' joint='{j}' kp='{robot.arm_kp[i]}' kv='{robot.arm_kv[i]}' "
        f"ctrlrange='{robot.arm_lower[i]} {robot.arm_upper[i]}'/>"
        for i, j in enumerate(robot.arm_joints)
    )
    g = robot.gripper
    lo, hi = g.ctrl_range
    common = f"kp='{g.kp}'" + (f" kv='{g.kv}'" if g.kv else "") + f" ctrlrange='{lo} {hi}' forcerange='-{g.force} {g.force}'"
    if g.tendon:
        return arm + f"<position name='{actuator_name(robot, g.joints[0])}' tendon='{g.tendon}' {common}/>"
    return arm + "".join(f"<position name='act_{j}' joint='{j}' {common}/>" for j in g.joints)


# the primitive arm's default classes and materials (its arm joints, fingers, geoms)
PRIMITIVE_DEFAULTS = (
    "<default class='arm'><joint axis='0 0 1' damping='1' armature='0.1'/></default>"
    f"<default class='finger'><joint type='slide' axis='0 1 0' range='0 {FINGER_MAX}' damping='{FINGER_DAMPING}' "
    "armature='0.01'/></default>"
    "<default class='visual'><geom group='1' density='0'/></default>"
    "<default class='collision'><geom group='3' rgba='0.5 0.5 0.9 0.3'/></default>"
)
PRIMITIVE_ASSETS = "<material name='arm_white' rgba='0.95 0.95 0.95 1'/><material name='arm_grey' rgba='0.3 0.3 0.32 1'/>"


def _primitive_mjcf() -> RobotMJCF:
    return RobotMJCF(defaults=PRIMITIVE_DEFAULTS, assets=PRIMITIVE_ASSETS, body=_arm_xml())


def _menagerie_mjcf() -> RobotMJCF:
    from robot_rl.sim import menagerie  # reads the installed Menagerie files; only this robot needs them

    return menagerie.panda_mjcf()


def _ur5e_mjcf() -> RobotMJCF:
    from robot_rl.sim import menagerie

    return menagerie.ur5e_mjcf()


# ---- the UR5e with a Robotiq 2F-85 (MuJoCo Menagerie's models, sim/menagerie.py) ------------------------------------
UR5E_JOINTS = ("shoulder_pan_joint", "shoulder_lift_joint", "elbow_joint", "wrist_1_joint", "wrist_2_joint",
               "wrist_3_joint")  # UR's own names (its ROS 2 driver's)
# UR5e's published ranges: 360 deg each way; the elbow 180 deg each way, as Menagerie's model limits it (self-collision)
UR5E_UPPER = np.array([6.2831, 6.2831, 3.1415, 6.2831, 6.2831, 6.2831])
# the 2F-85: one servo on Menagerie's tendon `split` (both fingers' drivers), its kp / kv and force limit; the right
# driver joint (0: open, 0.8 rad: closed) is the one commanded on the wire; its fingers move about 0.0525 m per rad,
# at most 0.075 m/s each (Robotiq's 150 mm/s closing speed)
ROBOTIQ_2F85 = Gripper(joints=("right_driver_joint",), open=0.0, closed=0.8, kp=100.0, kv=10.0, force=5.0,
                       tendon="split", pad_thickness=0.008, finger_travel=0.0525, max_speed=0.075)


def _builtin_robots() -> dict[str, Robot]:
    return {
        "primitive": Robot("primitive", HOME_QPOS, mjcf=_primitive_mjcf, gripper=Gripper(pad_gap=-0.005)),
        # Menagerie's pads (panda.xml fingertip_pad_collision_1) sit 1.5 mm off the finger's inner plane; its grip
        # site lies 6.5 mm further from the flange than ours, hence its own home posture
        # (tests/test_panda_menagerie.py).
        "panda_menagerie": Robot(
            "panda_menagerie", np.array([0.0, -0.184, 0.0, -2.4973, 0.0, 2.3133, 0.7854]), mjcf=_menagerie_mjcf,
            gripper=Gripper(pad_gap=0.003),
        ),
        "ur5e": Robot(
            # gripper down at (0.45, 0, 0.25) m, elbow up (found once with a damped least-squares IK on the model)
            "ur5e", np.array([0.3024, -1.4449, -1.9122, -1.3553, 1.5708, 0.3024]), mjcf=_ur5e_mjcf,
            arm_joints=UR5E_JOINTS, arm_lower=-UR5E_UPPER, arm_upper=UR5E_UPPER,
            arm_kp=(4500.0, 4500.0, 3500.0, 2000.0, 2000.0, 2000.0), arm_kv=(150.0, 150.0, 100.0, 40.0, 40.0, 40.0),
            gripper=ROBOTIQ_2F85, deploy_limits="ur5e",
        ),
    }


def _check_robot(obj) -> str | None:
    if not isinstance(obj, Robot):
        return f"{obj!r} is not a robot_rl.sim.robot.Robot"
    return "; ".join(obj.problems()) or None


# name -> Robot, the built-ins and those of installed packages (entry-point group "robot_rl.robots" naming a Robot
# object; sim/registry.py)
ROBOTS = Registry("robot", "robot_rl.robots", _builtin_robots, _check_robot, named=True)


def get_robot(name: str) -> Robot:
    return ROBOTS[name]


_FRAMES: dict[tuple[str, int], dict[str, tuple[str, str]]] = {}


def joint_frames(robot: Robot) -> dict[str, tuple[str, str]]:
    """{arm joint: (its body, the frame sensor type of its axis: framexaxis / frameyaxis / framezaxis)}, from the
    robot's compiled MJCF; ConfigError naming the joint when one is missing from the MJCF, is not a hinge at its
    body's origin turning about a body axis, or has limits outside the model's joint range."""
    key = (robot.name, id(robot))
    if key not in _FRAMES:
        import mujoco

        from robot_rl.sim.config import ConfigError

        model = mujoco.MjModel.from_xml_string(build_scene_xml(objects_xml="", robot=robot, bare=True))
        names = {mujoco.mj_id2name(model, mujoco.mjtObj.mjOBJ_JOINT, i) for i in range(model.njnt)}
        missing = [j for j in robot.joints if j not in names]
        if missing:
            raise ConfigError(f"robot {robot.name}: joint(s) {missing} of its description are not in its MJCF (joints "
                              f"there: {sorted(n for n in names if n)}); name the MJCF's joints in arm_joints / "
                              "gripper.joints")
        out = {}
        for i, j in enumerate(robot.arm_joints):
            jnt = model.joint(j)
            axis = np.asarray(jnt.axis)
            k = int(np.argmax(np.abs(axis)))
            if int(jnt.type[0]) != mujoco.mjtJoint.mjJNT_HINGE or np.abs(jnt.pos).max() > 1e-9 \
                    or abs(abs(axis[k]) - 1.0) > 1e-9 or axis[k] < 0:
                raise ConfigError(f"robot {robot.name}: arm joint {j} must be a hinge at its body's origin turning "
                                  f"about +x, +y or +z of its body (pos {jnt.pos.tolist()}, axis {axis.tolist()}); "
                                  "move it into a body of its own there")
            lo, hi = model.jnt_range[jnt.id]
            if model.jnt_limited[jnt.id] and (robot.arm_lower[i] < lo - 1e-6 or robot.arm_upper[i] > hi + 1e-6):
                raise ConfigError(f"robot {robot.name}: arm limits [{robot.arm_lower[i]:g}, {robot.arm_upper[i]:g}] of "
                                  f"joint {j} lie outside its range in the MJCF [{lo:g}, {hi:g}]; use the maker's "
                                  "published limits, within the model's range")
            out[j] = (mujoco.mj_id2name(model, mujoco.mjtObj.mjOBJ_BODY, int(jnt.bodyid[0])), f"frame{'xyz'[k]}axis")
        _FRAMES[key] = out
    return _FRAMES[key]


def _robot_sensors_xml(robot: Robot) -> str:
    xml = ""
    for j, (body, axis) in joint_frames(robot).items():
        xml += f"<framepos name='anchor_{j}' objtype='xbody' objname='{body}'/>"
        xml += f"<{axis} name='axis_{j}' objtype='xbody' objname='{body}'/>"
    xml += f"<framepos name='ee_pos' objtype='site' objname='{robot.ee_site}'/>"
    for ax in "xyz":
        xml += f"<frame{ax}axis name='ee_{ax}axis' objtype='site' objname='{robot.ee_site}'/>"
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
    bare: bool = False,
) -> str:
    """MJCF of the robot (default: the primitive arm) on a table plus a task's objects, sensors and contact pairs
    (bare: the robot's body tree without its servos and sensors, for reading its joints)."""
    robot = robot or ROBOTS["primitive"]
    r = robot.mjcf()
    actuators = "" if bare else actuators_xml(robot)
    robot_sensors = "" if bare else _robot_sensors_xml(robot)
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
  <tendon>{r.tendon}</tendon>
  <equality>{r.equality}</equality>
  <actuator>{actuators}</actuator>
  <sensor>{robot_sensors}{sensors_xml}</sensor>
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
