"""Observations on a real robot, assembled by the sim's own task code so the policy sees what it saw in sim.

Joint positions and velocities (JointState) and the task object's pose (a perception topic) are written
into the task's MuJoCo model (the same MJCF as sim/robot.py + the task's objects); MuJoCo's forward
kinematics and position-stage sensors fill in the end-effector frame and the joint anchors/axes; then the
task's `observe` runs on that `Phys`, exactly as in the sim backends. With env.action_history, obs["prev_actions"]
is the history of the actions the node commanded (`actions`, pushed by real/step_planner.py as each step's action
goes out; sim/actions.py ActionHistory, the sim env's own). The same model gives the
end-effector position of a command for the safety layer's workspace check, and `Phys` for the IK of
ee_delta actions (sim/actions.py).
"""

from __future__ import annotations

import mujoco
import numpy as np

from robot_rl.sim.actions import ActionHistory
from robot_rl.sim.task import Phys, neutral_params


class ObservationModel:
    def __init__(self, env, joints: list[str]):
        """env: a MuJoCo-backend BatchedEnv of the task (only its model and task are used); joints: wire order."""
        self.task = env.task
        self.actions = ActionHistory(1, env.action_history, env.action_space.neutral)  # commanded actions
        self.model: mujoco.MjModel = env.model
        self.data = mujoco.MjData(self.model)
        self._fk_data = mujoco.MjData(self.model)
        m = self.model
        self.qpos_adr = np.array([m.jnt_qposadr[m.joint(j).id] for j in joints])
        self.dof_adr = np.array([m.jnt_dofadr[m.joint(j).id] for j in joints])
        arm = [joints.index(j) for j in self.task.robot.arm_joints]
        self.arm_in_cmd = np.array(arm)  # where the arm joints sit in a command vector
        self.grip_site = m.site(self.task.robot.ee_site).id
        self.obj_adr = self.task.obj_qpos
        self.params = neutral_params(np, (1,))
        self._passive = self._passive_table(joints)
        mujoco.mj_resetData(m, self.data)
        mujoco.mj_resetData(m, self._fk_data)

    def _passive_table(self, joints: list[str]):
        """The robot's joints that nothing commands or reports (a linkage gripper's followers), as functions of the
        first gripper joint's position: (its wire index, its positions [G], their qpos addresses [K], their positions
        [G, K]), found by holding the gripper's servos at G targets across its range; None without such joints (a
        robot on the wire reports only the joints it commands, e.g. the 2F-85's driver)."""
        m, lay, robot = self.model, self.task.layout, self.task.robot
        passive = np.setdiff1d(np.arange(lay.robot_nq), np.concatenate([lay.arm_qpos, lay.finger_qpos]))
        if passive.size == 0:
            return None
        g, d = robot.gripper, mujoco.MjData(m)
        driver, rows = [], []
        for target in np.linspace(*g.ctrl_range, 17):
            mujoco.mj_resetData(m, d)
            d.qpos[lay.arm_qpos] = robot.home_qpos
            d.ctrl[:] = np.concatenate([robot.home_qpos, np.full(g.n_servos, target)])
            for _ in range(300):  # 1.5 s at the scene's 5 ms: the linkage settles at the servo's target
                mujoco.mj_step(m, d)
            driver.append(d.qpos[lay.finger_qpos[0]])
            rows.append(d.qpos[passive].copy())
        order = np.argsort(driver)
        return joints.index(g.joints[0]), np.asarray(driver)[order], passive, np.asarray(rows)[order]

    @property
    def obs_dims(self) -> dict[str, int]:
        return self.actions.add_dims(self.task.obs_dims())

    def object_pose_default(self) -> np.ndarray:
        """The object's pose (pos 3, quat wxyz 4) in the model's default configuration."""
        return self.model.qpos0[self.obj_adr : self.obj_adr + 7].copy()

    def phys(self, q: np.ndarray, qd: np.ndarray, object_pose: np.ndarray | None) -> Phys:
        """Phys (batch of 1) from joint positions/velocities [n] (wire order) and object pose [7] (pos, wxyz)."""
        d, m = self.data, self.model
        d.qpos[:] = m.qpos0
        d.qvel[:] = 0.0
        d.qpos[self.qpos_adr] = q
        d.qvel[self.dof_adr] = qd
        if self._passive is not None:  # a linkage's joints follow its driver's reported position
            at, driver, adr, rows = self._passive
            d.qpos[adr] = [np.interp(q[at], driver, rows[:, k]) for k in range(len(adr))]
        if object_pose is not None:
            d.qpos[self.obj_adr : self.obj_adr + 7] = object_pose
        mujoco.mj_kinematics(m, d)
        mujoco.mj_comPos(m, d)
        mujoco.mj_sensorPos(m, d)
        return Phys(d.qpos[None].copy(), d.qvel[None].copy(), d.sensordata[None].copy(), d.mocap_pos[None].copy())

    def observe(self, phys: Phys, target: np.ndarray) -> dict[str, np.ndarray]:
        """The task's observation dict, float32 [1, dim] per key (no noise: the robot brings its own), with the
        commanded actions so far where the env has an action history."""
        obs = self.task.observe(np, phys, np.asarray(target, dtype=np.float64)[None], self.params)
        return self.actions.add_to({k: v.astype(np.float32) for k, v in obs.items()})

    def ik_anchor(self, measured: np.ndarray, command: np.ndarray | None, lead_m: float) -> np.ndarray:
        """Joint positions [n] (wire order) the IK of the next ee_delta action starts from: the measured ones with the
        arm moved toward the last command sent, as far as keeps the end effector within lead_m (m, along the
        straight joint-space segment) of the measured one. The measured positions when there is no command yet or
        lead_m is 0.

        Why: sim's latency model (sim/actions.py delay) runs a delayed action from the state at its execution, so a
        sequence of actions adds up. The node plans at decision time; anchored on the measured pose, a robot with k
        steps of command latency would take k + 1 steps per step's motion. The last command sent is where the
        actions already on their way lead; the bound stops the command from running away from an arm that is held
        back (contact, a joint at its speed limit)."""
        if command is None or lead_m <= 0:
            return measured
        arm = self.arm_in_cmd
        gap = command[arm] - measured[arm]
        lead = float(np.linalg.norm(self.ee_pos(command) - self.ee_pos(measured)))
        frac = 1.0 if lead <= lead_m else lead_m / lead
        q = measured.copy()
        q[arm] = measured[arm] + frac * gap
        return q

    def ee_pos(self, command: np.ndarray) -> np.ndarray:
        """End-effector (grip site) position [3] of a command vector [n] in wire order."""
        d = self._fk_data
        d.qpos[self.qpos_adr[self.arm_in_cmd]] = command[self.arm_in_cmd]
        mujoco.mj_kinematics(self.model, d)
        return d.site_xpos[self.grip_site].copy()

    def ee_yaw(self, command: np.ndarray) -> float:
        """Gripper yaw (rad) of a command vector, as proprio's cos/sin pair encodes it (the site's x axis)."""
        d = self._fk_data
        d.qpos[self.qpos_adr[self.arm_in_cmd]] = command[self.arm_in_cmd]
        mujoco.mj_kinematics(self.model, d)
        x_axis = d.site_xmat[self.grip_site].reshape(3, 3)[:, 0]
        return float(np.arctan2(x_axis[1], x_axis[0]))


def ros_quat_to_mujoco(x: float, y: float, z: float, w: float) -> np.ndarray:
    """ROS (x, y, z, w) -> MuJoCo (w, x, y, z), normalized."""
    q = np.array([w, x, y, z], dtype=np.float64)
    n = np.linalg.norm(q)
    return q / n if n > 0 else np.array([1.0, 0.0, 0.0, 0.0])
