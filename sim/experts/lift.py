"""Scripted expert for lift."""

from __future__ import annotations

import numpy as np

from robot_rl.sim.experts import Expert


class LiftExpert(Expert):
    """Hover above the cube, descend, close, lift straight up.

    Phases are read from smoothed geometry each tick (so the expert can take over from any state, e.g. as the
    scripted human), with a few ticks of confirmation before a descent or a lift starts."""

    gain = 0.35  # fraction of a position error corrected per tick (0.35 stays damped with 2 ticks of latency)
    hover = 0.06  # m above the cube's centre while lining up
    align_tol = 0.006  # m (xy) within which the hand descends onto the cube
    keep_tol = 0.015  # m (xy) within which a started descent goes on
    low_tol = 0.008  # m above the cube's centre still counted as down at it
    close_rate = 0.006  # m per tick each finger's target closes (faster fingers can pass through the cube)
    close_ticks = 6  # ticks the fingers close at the grasp pose before the lift starts

    def clean_action(self, obs):
        return self.lift_action(obs, *(self.obs(obs, "object", f) for f in ("pos", "minus_ee", "height_to_go")))

    def lift_action(self, obs, pos, minus_ee, height_to_go):
        """Action that lifts the cube observed at `pos` [N, 3], `minus_ee` [N, 3] from the hand, `height_to_go`
        [N, 1] below its goal height."""
        ee, width = self.ee_pos(obs), self.smooth("width", self.gripper_width(obs), 0.4)
        cube = self.smooth("cube", pos, 0.15)  # at rest until grasped: the episode's mean
        # Two readings of the cube's offset from the hand, averaged: the observed one and the smoothed cube's.
        rel_now = 0.5 * (minus_ee + cube - ee)
        rel = self.smooth("rel", rel_now, 0.4)
        held_rel = self.smooth("held_rel", minus_ee, 0.3)  # constant while the cube moves with the hand
        togo = height_to_go[:, 0]

        xy_err = np.linalg.norm(rel[:, :2], axis=1)
        # the fingers closed on a cube-sized gap (a cube held across its diagonal is 1.41 times wider)
        half = self.tcfg.cube_half
        holding = (np.linalg.norm(held_rel[:, :2], axis=1) < 0.02) & (np.abs(held_rel[:, 2]) < 0.02) \
            & (width < 2.0 * half * 1.55) & (width > 2.0 * half * 0.6)
        aligned = self.ticks("aligned", xy_err < self.align_tol) >= 2
        low = rel[:, 2] > -self.low_tol
        descending = ee[:, 2] < cube[:, 2] + self.hover - 0.01
        at_grasp = low & (xy_err < self.keep_tol)
        # once closing, keep closing while the cube is still between the fingers (noise must not reopen them)
        near = (xy_err < 0.02) & (rel[:, 2] > -0.02)
        closing = (self.ticks("at_grasp", at_grasp) >= 2) | holding | ((self.last_ticks("close") > 0) & near)
        close_n = self.ticks("close", closing)
        # lift once the fingers have closed on the cube; keep lifting while it is held
        lifting = holding & ((close_n >= self.close_ticks_for(self.close_ticks, self.close_rate))
                             | (self.last_ticks("lift") > 0))
        self.ticks("lift", lifting)

        z = np.where(aligned | (descending & (xy_err < self.keep_tol)), 0.0, self.hover)
        # far off in xy: keep the height (no sweeping through the cube), move over it first
        z = np.where(xy_err > 0.02, np.maximum(-rel_now[:, 2], self.hover - 0.02), z)
        err = rel_now + np.stack([np.zeros_like(z), np.zeros_like(z), z], axis=1)
        move = np.where((close_n > 0)[:, None], 0.0, self.gain * err)  # hold still while the fingers close
        move = np.where(lifting[:, None], np.array([0.0, 0.0, 1.0]) * (togo[:, None] + 0.03), move)
        grip = np.where(lifting, -1.0, self.closing_grip(close_n, self.close_rate))
        return self.pack(self.move(move), grip)
