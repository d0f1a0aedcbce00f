"""Scripted expert for color_lift: the lift expert, aimed at the cube the instruction names."""

from __future__ import annotations

import numpy as np

from robot_rl.sim.experts.lift import LiftExpert


class ColorLiftExpert(LiftExpert):
    """Privileged: reads which cube is named from the env's task vector (`env.task_target`), not from the
    observation, which does not say; a learned policy has to get it from the instruction and the images."""

    def clean_action(self, obs):
        named = self.env.task_target[:, 0] > 0.5
        return self.lift_action(obs, *(np.where(named[:, None], self.obs(obs, "object", f"b_{f}"),
                                                self.obs(obs, "object", f"a_{f}"))
                                       for f in ("pos", "minus_ee", "height_to_go")))
