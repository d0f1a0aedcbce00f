"""Scripted expert for lift."""

from __future__ import annotations

import numpy as np

from sim.experts import Expert, ee_pos, gripper_width


class LiftExpert(Expert):
    """Hover above the cube, descend, close, lift straight up."""

    def clean_action(self, obs):
        return self.lift_action(obs, obs["object"])

    def lift_action(self, obs, cube_obs):
        """Action that lifts the cube described by `cube_obs` [N, 11]: pos, quat, pos - ee, height to go."""
        o = cube_obs.astype(np.float64)
        cube, rel, togo = o[:, 0:3], o[:, 7:10], o[:, 10]
        ee, width = ee_pos(obs), gripper_width(obs)
        xy_err = np.linalg.norm(rel[:, :2], axis=1)
        holding = (xy_err < 0.02) & (np.abs(rel[:, 2]) < 0.02) & (width < 0.055)
        lifted = holding & (self.tcfg.lift_height - togo > 0.01)
        aligned = xy_err < 0.006
        low = rel[:, 2] > -0.008
        target = cube.copy()
        target[:, 2] = np.where(aligned, cube[:, 2], cube[:, 2] + 0.06)
        # keep descending only once above the cube; move in xy at hover height first
        target[:, 2] = np.where(~aligned & (xy_err > 0.02), np.maximum(ee[:, 2], cube[:, 2] + 0.04), target[:, 2])
        close = (aligned & low) | holding
        lift_target = ee + np.array([0.0, 0.0, 1.0]) * (togo[:, None] + 0.03)
        target = np.where((holding & (width < 0.045))[:, None] | lifted[:, None], lift_target, target)
        grip = np.where(close | lifted, -1.0, 1.0)
        return self.pack(self.move(target - ee), grip)
