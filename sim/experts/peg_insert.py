"""Scripted expert for peg_insert."""

from __future__ import annotations

import numpy as np

from sim.experts import Expert, ee_pos, ee_yaw, gripper_width
from sim.robot import FINGER_MAX


def _wrap(a, period):
    return (a + 0.5 * period) % period - 0.5 * period


class PegInsertExpert(Expert):
    """Turn to the peg's square yaw, descend, grasp it just above its centre (closing the fingers gradually),
    lift it gently off the table and clear of the walls, turn it square to the hole, carry it over the hole,
    centre the peg's own bottom point (from its position and tilt) on the opening, lower it slowly, push in.

    Stateful only in the drift estimate below (reset when an auto-reset teleports the arm)."""

    hover = 0.05  # m above the grasp point while lining up to pick
    carry = 0.03  # m the peg's bottom clears the walls' top while carrying
    lift_gently = 0.015  # m, height of the peg's bottom below which it is lifted slowly
    lift_speed = 0.005  # m per step for that first lift
    above = 0.008  # m the peg's bottom hovers above the walls' top while centring
    descend = 0.003  # m per step while lowering the peg onto the opening
    push = 0.003  # m per step once the peg's bottom is inside the opening
    xy_tol = 0.0007  # m, centring tolerance (per axis) before inserting
    xy_keep = 0.002  # m, centring tolerance (per axis) to keep descending once started
    yaw_tol = 0.03  # rad, peg yaw tolerance before inserting
    yaw_rate = 0.05  # rad per step while turning the held peg
    close_rate = 0.006  # m per step each finger's target leads its position while closing
    squeeze_q = 0.0  # m, finger target once on the peg (sets the grip force)

    bias_gain = 0.2  # low-pass gain of the drift estimate
    fine_gain = 0.6  # fraction of the remaining xy error commanded per step while centring
    max_bias = 0.004  # m, clip of the drift estimate

    # The ee_delta IK's null-space pull moves the hand by up to ~1 mm per step on its own; the fit has
    # 1.5 mm per side. Estimate that drift from the last step (measured - commanded motion) and cancel it.
    _prev_ee = None
    _prev_cmd = None

    def act(self, obs):
        a = super().act(obs)
        self._prev_ee = ee_pos(obs)
        self._prev_cmd = a[:, :3].astype(np.float64) * self.max_delta
        return a

    def _drift(self, ee):
        if self._prev_ee is None or self._prev_ee.shape != ee.shape:
            self._bias = np.zeros_like(ee)
            return self._bias
        meas = ee - self._prev_ee - self._prev_cmd
        fresh = np.linalg.norm(ee - self._prev_ee, axis=1) > 0.05  # an auto-reset teleported the arm
        b = np.clip(self._bias + self.bias_gain * (meas - self._bias), -self.max_bias, self.max_bias)
        self._bias = np.where(fresh[:, None], 0.0, b)
        return self._bias

    def clean_action(self, obs):
        o = obs["object"].astype(np.float64)
        peg, zax, hole, rel_ee = o[:, 0:3], o[:, 5:8], o[:, 8:11], o[:, 14:17]
        yaw4 = np.arctan2(o[:, 4], o[:, 3]) / 4.0  # peg yaw modulo pi/2, in [-pi/4, pi/4]
        ee, width, eyaw = ee_pos(obs), gripper_width(obs), ee_yaw(obs)
        hh, hw = self.tcfg.peg_half_height, self.tcfg.peg_half_width
        bias = self._drift(ee)
        zax = zax / np.maximum(np.linalg.norm(zax, axis=1, keepdims=True), 1e-6)

        # ---- pick -------------------------------------------------------------------------------
        grasp_pt = peg + self.tcfg.grasp_height * zax
        gerr = grasp_pt - ee
        gxy = np.linalg.norm(gerr[:, :2], axis=1)
        yaw_err = _wrap(yaw4 - eyaw, 0.5 * np.pi)
        aligned = (gxy < 0.004) & (np.abs(yaw_err) < 0.05)
        pick_target = grasp_pt.copy()
        hover_z = np.where(gxy > 0.01, np.maximum(ee[:, 2], grasp_pt[:, 2] + self.hover), ee[:, 2])
        pick_target[:, 2] = np.where(aligned, grasp_pt[:, 2], hover_z)
        close = (gxy < 0.008) & (np.abs(gerr[:, 2]) < 0.008) & (np.abs(yaw_err) < 0.1)
        pick_move = self.move(pick_target - ee - bias)

        # ---- place ------------------------------------------------------------------------------
        holding = (
            (np.linalg.norm(rel_ee[:, :2], axis=1) < hw + 0.01)
            & (np.abs(rel_ee[:, 2]) < hh + 0.01)
            & (width < 2 * hw + 0.004)
            & (width > 0.005)  # the pads can sink well into the peg when it turns in the grasp
        )
        bottom = peg - hh * zax
        top = hole[:, 2]
        exy = hole[:, :2] - bottom[:, :2]
        e = np.linalg.norm(exy, axis=1)
        entering = (bottom[:, 2] < top - 0.001) & (e < 0.004)  # already in the opening: keep going
        centred = (np.abs(exy).max(axis=1) < self.xy_tol) & (np.abs(yaw4) < self.yaw_tol)
        near = e < 0.01
        clear = bottom[:, 2] > top + 0.5 * self.carry
        # desired displacement of the peg's bottom
        dz_far = top + self.carry - bottom[:, 2]
        dz_near = self.fine_gain * (top + self.above - bottom[:, 2])
        # once on the way down, keep going while roughly centred (the arm's small moves are not crisp)
        going = (bottom[:, 2] < top + self.above - 0.002) & (np.abs(exy).max(axis=1) < self.xy_keep)
        dz = np.where(near & (centred | going), -self.descend, np.where(near, dz_near, dz_far))
        dz = np.where(entering, -self.push, dz)
        # break the peg off the table gently: a fast first lift levers it round in the fresh grasp
        dz = np.where(bottom[:, 2] < self.lift_gently, np.minimum(dz, self.lift_speed), dz)
        gain = np.where(near | entering, self.fine_gain, 1.0)
        dxy = np.where((near | clear | entering)[:, None], gain[:, None] * exy, 0.0)
        place_move = self.move(np.concatenate([dxy, dz[:, None]], axis=1) - bias)
        # turn the peg square to the hole only once it is off the table, and gently
        place_yaw = np.where(bottom[:, 2] > 0.02, np.clip(-yaw4, -self.yaw_rate, self.yaw_rate), 0.0)

        move = np.where(holding[:, None], place_move, pick_move)
        dyaw = np.where(holding, place_yaw, yaw_err)
        # Close gradually (the fingers would tunnel through a thin peg at full speed), then squeeze.
        q = 0.5 * (width + 0.005)  # finger joint position
        on_peg = width < 2 * hw + 0.004
        squeeze = np.where(on_peg, self.squeeze_q, np.maximum(q - self.close_rate, self.squeeze_q))
        grip_closed = 2.0 * squeeze / FINGER_MAX - 1.0
        grip = np.where(holding | close, grip_closed, 1.0)
        return self.pack(move, grip, dyaw)
