"""A third arm, described and nothing else: six joints of capsules with UR5e's link offsets (shoulder pan about z,
shoulder lift, elbow and wrist 1 about y, wrist 2 about z, wrist 3 about y) and the primitive arm's parallel hand
on its flange. Nothing of robot_rl is edited for it: its description, its MJCF and its limits file are all it has.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from robot_rl.sim.robot import PRIMITIVE_ASSETS, PRIMITIVE_DEFAULTS, Robot, RobotMJCF, primitive_hand_xml

JOINTS = ("shoulder_pan_joint", "shoulder_lift_joint", "elbow_joint", "wrist_1_joint", "wrist_2_joint",
          "wrist_3_joint")
LOWER = np.array([-6.2832, -6.2832, -3.1416, -6.2832, -6.2832, -6.2832])  # rad: UR5e's published ranges
UPPER = -LOWER

# body, pos, quat (w x y z), joint axis, mass (kg), capsule (fromto, radius) in the body's frame
_LINKS = (
    ("shoulder_link", "0 0 0.163", "1 0 0 0", "0 0 1", 3.7, "0 0 -0.1 0 0 0.05", 0.06),
    ("upper_arm_link", "0 0.138 0", "0.7071068 0 0.7071068 0", "0 1 0", 8.393, "0 0 0 0 0 0.425", 0.055),
    ("forearm_link", "0 -0.131 0.425", "1 0 0 0", "0 1 0", 2.275, "0 0 0 0 0 0.392", 0.045),
    ("wrist_1_link", "0 0 0.392", "0.7071068 0 0.7071068 0", "0 1 0", 1.219, "0 0 0 0 0.127 0", 0.04),
    ("wrist_2_link", "0 0.127 0", "1 0 0 0", "0 0 1", 1.219, "0 0 0 0 0 0.1", 0.04),
    ("wrist_3_link", "0 0 0.1", "1 0 0 0", "0 1 0", 0.1889, "0 0 0 0 0.1 0", 0.035),
)


def _mjcf() -> RobotMJCF:
    body = ""
    for (name, pos, quat, axis, mass, fromto, r), joint, lo, hi in zip(_LINKS, JOINTS, LOWER, UPPER):
        body += (f"<body name='{name}' pos='{pos}' quat='{quat}' gravcomp='1'>"
                 f"<joint name='{joint}' axis='{axis}' range='{lo} {hi}' class='arm'/>"
                 f"<geom type='capsule' fromto='{fromto}' size='{r}' mass='{mass}' class='visual' material='arm_white'/>")
    # the flange: 0.1 m along wrist 3's y axis, its z axis pointing out of it; the hand right on it
    body += "<body name='flange' pos='0 0.1 0' quat='0.7071068 -0.7071068 0 0'>" + primitive_hand_xml("0 0 0", "1 0 0 0")
    body += "</body>" + "</body>" * len(_LINKS)
    base = ("<body name='base' quat='0 0 0 1'>"
            "<geom type='cylinder' size='0.075 0.045' pos='0 0 0.045' mass='4' class='visual' material='arm_grey'/>")
    return RobotMJCF(defaults=PRIMITIVE_DEFAULTS, assets=PRIMITIVE_ASSETS, body=base + body + "</body>")


SIX_ARM = Robot(
    "six_arm",
    # gripper down at (0.45, 0, 0.25) m, elbow up (found once with a damped least-squares IK on this model)
    home_qpos=np.array([0.3024, -1.4847, -2.0222, -1.2055, 1.5708, -1.2684]),
    mjcf=_mjcf,
    arm_joints=JOINTS,
    arm_lower=LOWER,
    arm_upper=UPPER,
    arm_kp=(4500.0, 4500.0, 3500.0, 2000.0, 2000.0, 2000.0),
    arm_kv=(150.0, 150.0, 100.0, 40.0, 40.0, 40.0),
    deploy_limits=str(Path(__file__).with_name("limits.yaml")),
)
