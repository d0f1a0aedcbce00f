"""The intervention protocol: who controls each env this step, what runs, and per-episode bookkeeping.

A supervisor (a teleop device through `DeviceSupervisor`, or the scripted human) decides per step and
env whether the human is in control and what the human would do. `InterventionController` executes the
human's action where the human controls and the policy's elsewhere, flags those steps, and counts
per episode: steps, human steps, take-overs, rewinds, a device lost mid-episode, the human's success /
failure mark. Usable by any vectorized loop over a batched env (the residual-RL Collector, the teleop
tool):

    hil = InterventionController(env.num_envs, ScriptedHuman(env, cfg))
    action, human = hil.act(obs, policy_action)          # [N, A] executed, [N] bool
    obs, reward, done, info = env.step(action)
    info["intervention"] = human                          # what recorders and the replay read
    hil.end_episodes(done)                                # per-episode stats of finished episodes
    log.scalars(summary(hil.pop_finished()), step)        # hil/intervention_rate, ...
"""

from __future__ import annotations

import dataclasses
import sys

import numpy as np

from robot_rl.hil.device import BUTTONS, Device, DeviceDisconnected, command_action

EVENTS = tuple(b for b in BUTTONS if b != "take_over")  # what a supervisor reports besides control


def no_events(n: int) -> dict[str, np.ndarray]:
    return {e: np.zeros(n, bool) for e in EVENTS}


@dataclasses.dataclass
class Decision:
    take: np.ndarray  # [N] bool: the human controls this step
    action: np.ndarray  # [N, A]: the human's action where take (elsewhere: the policy's)
    events: dict  # EVENTS -> [N] bool: buttons pressed this step
    disconnected: np.ndarray  # [N] bool: the env's device is lost (the policy keeps control)


@dataclasses.dataclass
class EpisodeInterventions:
    """Intervention bookkeeping of one finished episode."""

    env: int
    steps: int = 0
    intervention_steps: int = 0
    takeovers: int = 0
    rewinds: list = dataclasses.field(default_factory=list)  # [{"step", "undone", "undone_intervention"}]
    device_lost: bool = False
    label: str | None = None  # "success" / "failure" when the human marked the episode

    @property
    def rate(self) -> float:
        return self.intervention_steps / self.steps if self.steps else 0.0

    def to_json(self) -> dict:
        return {"intervention_steps": self.intervention_steps, "intervention_rate": self.rate,
                "takeovers": self.takeovers, "rewinds": self.rewinds, "device_lost": self.device_lost,
                "human_label": self.label}


class DeviceSupervisor:
    """One teleop device supervising env `env_index` of a batched env (the others stay with the policy).

    `take_over` toggles control; on take-over the device's gripper starts from the policy's gripper
    command. `teleop=True`: no policy, the device always controls. A device lost mid-episode (it raised
    DeviceDisconnected) hands control back to the policy for good and reports `disconnected`."""

    def __init__(self, device: Device, num_envs: int, action_dim: int, use_yaw: bool, env_index: int = 0,
                 teleop: bool = False):
        if not (0 <= env_index < num_envs):
            raise ValueError(f"env_index={env_index} must be in [0, {num_envs})")
        self.device, self.num_envs, self.action_dim, self.use_yaw = device, num_envs, action_dim, use_yaw
        self.env_index, self.teleop = env_index, teleop
        self.engaged = teleop
        self.lost: str | None = None

    def reset(self, env_ids=None) -> None:
        if env_ids is None or self.env_index in np.atleast_1d(env_ids):
            self.engaged = self.teleop  # a new episode starts with the policy in control

    def decide(self, obs: dict, policy_action: np.ndarray, human: np.ndarray) -> Decision:
        n, i = self.num_envs, self.env_index
        take, events, lost = np.zeros(n, bool), no_events(n), np.zeros(n, bool)
        action = np.array(policy_action, dtype=np.float32, copy=True)
        if self.lost is None:
            try:
                cmd = self.device.poll()
            except DeviceDisconnected as e:
                self.lost = str(e)
                self.engaged = False
                print(f"warning: {e}; the policy keeps control and the episode is flagged device_lost",
                      file=sys.stderr)
        if self.lost is not None:
            lost[i] = True
            return Decision(take, action, events, lost)
        if cmd.pressed("take_over") and not self.teleop:
            self.engaged = not self.engaged
            if self.engaged:
                self.device.set_grip(float(policy_action[i, -1]))
                cmd = dataclasses.replace(cmd, grip=self.device.grip)
        if cmd.pressed("rewind") and not self.engaged:
            self.engaged = True  # rewind-then-correct: the human has the robot after going back
            self.device.set_grip(float(policy_action[i, -1]))
            cmd = dataclasses.replace(cmd, grip=self.device.grip)
        for e in EVENTS:
            events[e][i] = cmd.pressed(e)
        take[i] = self.engaged
        if self.engaged:
            action[i] = command_action(cmd, self.action_dim, self.use_yaw)
        return Decision(take, action, events, lost)


class InterventionController:
    """Executes human actions where the supervisor takes control; keeps per-episode intervention stats."""

    def __init__(self, num_envs: int, supervisor):
        self.num_envs, self.supervisor = int(num_envs), supervisor
        self.human = np.zeros(self.num_envs, bool)  # who controlled each env at the last step
        self.events = no_events(self.num_envs)
        self._open = [EpisodeInterventions(env=i) for i in range(self.num_envs)]
        self.finished: list[EpisodeInterventions] = []
        self.total_steps = 0
        self.total_intervention_steps = 0

    def act(self, obs: dict, policy_action) -> tuple[np.ndarray, np.ndarray]:
        """(executed action [N, A] float32, intervention [N] bool) for this step's observations and policy actions."""
        policy_action = np.asarray(policy_action, dtype=np.float32)
        if policy_action.shape[0] != self.num_envs:
            raise ValueError(f"policy_action has {policy_action.shape[0]} rows for {self.num_envs} envs")
        d = self.supervisor.decide(obs, policy_action, self.human)
        take = np.asarray(d.take, bool)
        action = np.where(take[:, None], d.action, policy_action).astype(np.float32)
        for i in range(self.num_envs):
            ep = self._open[i]
            ep.steps += 1
            ep.intervention_steps += int(take[i])
            ep.takeovers += int(take[i] and not self.human[i])
            ep.device_lost |= bool(d.disconnected[i])
            for label in ("success", "failure"):
                if d.events[label][i]:
                    ep.label = label
        self.total_steps += self.num_envs
        self.total_intervention_steps += int(take.sum())
        self.human, self.events = take, d.events
        return action, take.copy()

    def current(self, env: int) -> EpisodeInterventions:
        """The open (unfinished) episode's bookkeeping of env `env`."""
        return self._open[env]

    def rewind(self, env: int, undone: int, undone_intervention: int) -> None:
        """Env `env` went back `undone` steps (of which `undone_intervention` were human): uncount them."""
        ep = self._open[env]
        ep.rewinds.append({"step": ep.steps - undone, "undone": int(undone), "undone_intervention": int(undone_intervention)})
        ep.steps -= undone
        ep.intervention_steps -= undone_intervention
        self.total_steps -= undone
        self.total_intervention_steps -= undone_intervention

    def end_episodes(self, done) -> list[EpisodeInterventions]:
        """Close the episodes of envs where `done`; returns their stats (also kept for pop_finished)."""
        ids = np.nonzero(np.asarray(done, bool))[0]
        out = []
        for i in ids.tolist():
            out.append(self._open[i])
            self._open[i] = EpisodeInterventions(env=i)
            self.human[i] = False
        if len(ids):
            self.supervisor.reset(ids)
        self.finished += out
        return out

    def pop_finished(self) -> list[EpisodeInterventions]:
        out, self.finished = self.finished, []
        return out

    @property
    def fraction(self) -> float:
        """Human steps / all steps since the start."""
        return self.total_intervention_steps / self.total_steps if self.total_steps else 0.0


def summary(episodes: list[EpisodeInterventions], prefix: str = "hil/") -> dict[str, float]:
    """TensorBoard scalars of finished episodes: mean intervention rate, share of episodes with a take-over, ..."""
    if not episodes:
        return {}
    return {
        f"{prefix}intervention_rate": float(np.mean([e.rate for e in episodes])),
        f"{prefix}intervened_episodes": float(np.mean([e.intervention_steps > 0 for e in episodes])),
        f"{prefix}takeovers_per_episode": float(np.mean([e.takeovers for e in episodes])),
        f"{prefix}intervention_steps": float(np.sum([e.intervention_steps for e in episodes])),
        f"{prefix}device_lost_episodes": float(np.sum([e.device_lost for e in episodes])),
    }
