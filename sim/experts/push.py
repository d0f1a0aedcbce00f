"""Scripted expert for push."""

from __future__ import annotations

import numpy as np

from robot_rl.sim.experts import Expert


class PushExpert(Expert):
    """Keep the gripper closed; go over the top to a point behind the cube on the goal->cube line, down to a
    low push height, push along the cube->goal line while steering the hand back onto it, and lift and
    re-position when the hand ends up off the line (the cube turned or slid sideways).

    Stateless: the phase is read from the geometry each step (hand height, its offset from the line)."""

    tip = 0.01  # m the closed fingertips reach below the grip site (robot.py: finger boxes vs grip_site)
    hover = 0.045  # m the fingertips clear the cube's top while moving over it
    push_z = 0.016  # m, grip-site height while pushing (tips 6 mm above the table: a low, level push)
    standoff = 0.07  # m from the cube's centre to the pre-push point (clears the cube at any yaw)
    behind = 0.025  # m the hand's centre must be behind the cube's centre (along the line) to push
    descend_tol = 0.01  # m, xy error to the pre-push point before going down (twice that to keep going)
    lateral_tol = 0.018  # m off the line beyond which the push is abandoned (lift, re-position)
    low_tol = 0.015  # m above push height still counted as down at the cube
    speed = 0.012  # m per step along the line while pushing
    steer_gain = 0.5  # fraction of the lateral offset corrected per step while pushing
    gain = 0.5  # fraction of a small position error corrected per step (1 oscillates with 2 ticks of latency)
    settle = 0.015  # m, cube-goal distance where the push stops (well inside the goal radius)

    def clean_action(self, obs):
        cube, to_goal, rel = (self.obs(obs, "object", f) for f in ("pos", "goal_minus_xy", "minus_ee"))
        ee = self.ee_pos(obs)
        dist = np.linalg.norm(to_goal, axis=1)
        d = to_goal / np.maximum(dist, 1e-6)[:, None]  # push direction (unit, xy)
        n = np.stack([-d[:, 1], d[:, 0]], axis=1)  # its left normal
        hand = -rel[:, :2]  # hand xy relative to the cube
        along = np.sum(hand * d, axis=1)  # < 0: behind the cube
        lateral = np.sum(hand * n, axis=1)

        # Heights from the nominal cube, not the observed one: a hand that followed a tilting cube up
        # would drag its near face up by friction and tip it over.
        top = 2.0 * self.tcfg.cube_half
        z_hover = top + self.tip + self.hover
        low = ee[:, 2] < self.push_z + self.low_tol
        pushing = low & (along < -self.behind) & (np.abs(lateral) < self.lateral_tol)

        # ---- push: advance along the line, steer the hand back onto it ----------------------------
        advance = np.clip(dist - self.settle, 0.0, self.speed)
        push_xy = advance[:, None] * d - self.steer_gain * lateral[:, None] * n
        push_move = np.concatenate([push_xy, self.gain * (self.push_z - ee[:, 2])[:, None]], axis=1)

        # ---- re-position: straight up, over to the pre-push point, down onto it -----------------
        err = cube[:, :2] - self.standoff * d - ee[:, :2]
        e = np.linalg.norm(err, axis=1)
        near = (e < self.descend_tol) | ((e < 2.0 * self.descend_tol) & (ee[:, 2] < z_hover - 0.01))
        clear = ee[:, 2] > top + self.tip + 0.015  # fingertips above the cube's top: free to move sideways
        z_target = np.where(near, self.push_z, z_hover)
        xy = np.where((clear | near)[:, None], self.gain * err, 0.0)
        repo_move = np.concatenate([xy, (z_target - ee[:, 2])[:, None]], axis=1)

        move = np.where(pushing[:, None], push_move, repo_move)
        move = np.where((dist < self.settle)[:, None], 0.0, move)  # on the goal: hold still
        return self.pack(self.move(move), -np.ones(len(ee)))
