"""The learner's intervention bookkeeping when the humans act at the actors."""


class InterventionLedger:
    """The learner's intervention bookkeeping when the humans (scripted, or teleop at a robot) are at the actors:
    the per-episode stats they send, and the human share of all accepted steps. Read by ResidualWorkspace._log
    like the single-process InterventionController (pop_finished, fraction)."""

    def __init__(self):
        self.finished: list = []  # robot_rl.hil.EpisodeInterventions of ended episodes, not logged yet
        self.total_steps = 0
        self.total_intervention_steps = 0

    def pop_finished(self) -> list:
        out, self.finished = self.finished, []
        return out

    @property
    def fraction(self) -> float:
        return self.total_intervention_steps / self.total_steps if self.total_steps else 0.0
