"""Vectorized collection: N envs, the base's chunks open-loop from per-env queues, the residual every step.

Per vector step:
    action = compose(base, residual(obs, base), noise=exploration noise, bound=scale)  (policies/residual.py)
           = clip(base + clip(residual + noise, -scale, scale), -1, 1)
    with interventions (hil): the human's action instead, where they are in control; flagged in the replay,
    and that env's base chunk is dropped so the base replans from the state the human hands back
    env.step(action) -> reward, done, final_obs (auto-reset)
    reward (REWARDS): success = the env's sparse success flag, env = the task's dense reward, learned = the
    learned success classifier at final_obs, which also decides the learner's terminations (robot_rl/reward);
    with a reward model, + shaping * (gamma Phi(final_obs) - Phi(obs)). Ground truth (info success /
    progress) then only feeds the rollout statistics
    next base action: the base action at final_obs (the queue's next entry, or a fresh chunk), the value the
    critic bootstraps from; not computed for envs that terminated unless the learner bootstraps there anyway
    (reward=learned: an env end without classifier success is a cut)
    replay row: obs, base action, executed action, reward, final_obs, next base action, terminated,
    truncated, intervention (obs and final_obs as the residual reads them: state, + base features with
    residual.base_features)
    envs that ended start over: history refilled from the new first observation, queue emptied
A base that reads cameras gets uint8 frame histories; one that reads an instruction gets each env's episode
instruction (env.instruction; the ended episode's for its final_obs, the new one's after the reset). A reward
model that reads cameras gets the frames of obs and final_obs (the env renders them: env.cameras=[...]), one
that reads the instruction gets the episode's, kept the same way.
Works with any BatchedEnv (MuJoCo C or MJX): it only uses the host API.
"""

from __future__ import annotations

import numpy as np

from robot_rl.rl.replay import POTENTIAL_FIELDS, Replay
from robot_rl.policies.residual import ResidualPolicy, compose
from robot_rl.policies.runner import ChunkQueue, ObsHistory

REWARDS = ("success", "env", "learned")
CLASSIFIER_SUCCESS = ("once", "end", "every")  # what a learned classifier's success does in an env episode


class Collector:
    def __init__(self, env, policy: ResidualPolicy, replay: Replay, reward: str = "success", explore_std: float = 0.0,
                 seed: int = 0, learned=None, hil=None, online=None, classifier_success: str = "once"):
        """`explore_std`: std of the residual's exploration noise as a fraction of its scale (training passes
        rl.explore_std). `learned`: a robot_rl.reward.LearnedReward; required by reward="learned", optional shaping with
        "success" (then built with success="env"). `hil`: a robot_rl.hil.InterventionController (a human or the
        scripted human) that may take over envs; its steps are executed, flagged and recorded. `online`: a
        robot_rl.reward.online.OnlineReward that records every episode and labels some (reward="learned").
        `classifier_success` (reward="learned", CLASSIFIER_SUCCESS): what the classifier's success does in an env
        episode: "once" pays the first fire, which ends the learner's episode, while the env's runs on to its own end
        (the rows after it are recorded as after_claim: labels see them, the learner never samples them); "end"
        pays its first fire (a learner termination) and ends the env's episode there (env.end_episodes), as a robot's
        success detector does; "every" pays every fire."""
        if classifier_success not in CLASSIFIER_SUCCESS:
            raise ValueError(f"classifier_success={classifier_success!r}; valid: {', '.join(CLASSIFIER_SUCCESS)}")
        if reward not in REWARDS:
            raise ValueError(f"reward={reward!r}; valid: {', '.join(REWARDS)}")
        if reward == "learned" and (learned is None or learned.success != "classifier"):
            raise ValueError("reward='learned' needs a LearnedReward with success='classifier' (reward_model=PATH)")
        if reward == "success" and learned is not None and learned.success != "env":
            raise ValueError("reward='success' takes r_success from the env: build the LearnedReward with "
                             "success='env'")
        if reward == "env" and learned is not None:
            raise ValueError("reward='env' is already dense: a learned reward / shaping goes with 'success' or "
                             "'learned'")
        self.learned = learned
        self.hil = hil
        self.online = online
        self.classifier_success = classifier_success if reward == "learned" else "every"
        self.fired = np.zeros(env.num_envs, bool)  # the classifier fired in the env's current episode
        self.human = np.zeros(env.num_envs, bool)  # who controlled each env at the last step
        self.env, self.policy, self.replay = env, policy, replay
        self.reward, self.explore_std = reward, float(explore_std)
        self.keys = policy.obs_keys
        n = env.num_envs
        self.history = ObsHistory(policy.spec.obs_dims, policy.spec.obs_horizon, n, policy.spec.image_shapes)
        self.queue = ChunkQueue(policy.base, n, env.action_dim)
        self.rng = np.random.default_rng(seed)
        self.obs = np.zeros((n, sum(policy.spec.obs_dims.values())), np.float32)
        self.obs_dict: dict[str, np.ndarray] = {}  # the current observations, for the reward model
        self.base = np.zeros((n, env.action_dim), np.float32)
        self.instruction = None  # each env's current instruction (str array [N]) when the base or reward reads one
        self.ever_success = np.zeros(n, bool)
        self.finished: list[tuple[bool, float, int]] = []  # (success, env return, length) of ended episodes

    def start(self, seed: int) -> None:
        """(Re)start every env's episode; a replay row written before is cut there (no bootstrapping across)."""
        self.replay.mark_cut()
        obs = self.env.reset(seed)
        self.history.reset()
        self.queue.reset()
        self.history.push(obs)
        self.instruction = self._instructions()
        self.base = self.queue.next(self._base_input())
        self.obs = self.policy.inputs(obs, self.policy.base_features(self._base_input()))
        self.obs_dict = obs
        self.ever_success[:] = False
        self.fired[:] = False
        if self.online is not None:
            self.online.start(np.arange(self.env.num_envs), obs)

    def step(self, explore: bool = True) -> None:
        """One vector step of every env; writes one replay row."""
        scale = self.policy.actor.cfg.scale
        res = self.policy.residual(self.obs, self.base)
        noise = None
        if explore and self.explore_std > 0:
            noise = self.rng.normal(0.0, self.explore_std * scale, res.shape).astype(np.float32)
        action = compose(self.base, res, noise=noise, bound=scale).astype(np.float32)
        human = np.zeros(self.env.num_envs, bool)
        if self.hil is not None:  # the human's action replaces the policy's where they are in control
            action, human = self.hil.act(self.obs_dict, action)
        obs, reward, done, info = self.env.step(action)
        intervention = np.asarray(info["intervention"], bool) | human
        term, trunc = info["terminated"], info["truncated"]
        final = info["final_obs"]
        if self.learned is not None:  # learned success (or env success) + shaping; may move terminations
            text = self.instruction if self.learned.reads_instruction else None  # obs' and final_obs' episode
            eligible = None if self.classifier_success == "every" else ~self.fired  # "once": the first fire pays
            after_claim = np.zeros_like(done) if eligible is None else ~eligible  # past the learner's episode
            r, l_term, l_trunc, *phi = self.learned.label(self.obs_dict, final, info["success"], term, trunc, text,
                                                          eligible=eligible)
            potentials = dict(zip(POTENTIAL_FIELDS, phi))
        else:  # the replay keeps NaN potentials: unknown
            r = info["success"].astype(np.float32) if self.reward == "success" else np.asarray(reward, np.float32)
            l_term, l_trunc, potentials, after_claim = term, trunc, {}, np.zeros_like(done)
        claimed = self.fired | (l_term if self.learned is not None else False)  # the classifier fired this episode
        cut = (l_term & ~done) if self.classifier_success == "end" else np.zeros_like(done)  # it ended these
        if cut.any():  # their next episodes start now; final (their last observation) stays as it was
            ids = np.nonzero(cut)[0]
            obs = {k: v.copy() for k, v in obs.items()}
            for k, v in self.env.end_episodes(ids).items():
                obs[k][ids] = v
        ended = done | cut
        self.history.push(final)
        if human.any():  # the base's chunk went stale while the human drove: replan from here at hand-back
            self.queue.reset(np.nonzero(human)[0])
        next_base = np.zeros_like(self.base)
        features = self.policy.base_features(self._base_input())  # at final_obs, the ended episodes' instructions
        # the base action at final_obs: where the env goes on (next step's base), or where the learner bootstraps;
        # with a classifier, everywhere (a refit may turn its terminations into cuts that bootstrap)
        boot = np.arange(len(term)) if self.reward == "learned" else np.nonzero(~term | l_trunc)[0]
        if len(boot):
            next_base[boot] = self.queue.next(self._base_input(), boot)  # the ended episodes' own instructions
        self.replay.add(obs=self.obs, base_action=self.base, action=action, reward=r,
                        next_obs=self.policy.inputs(final, features), next_base_action=next_base, terminated=l_term,
                        truncated=l_trunc, intervention=intervention, ended=ended, after_claim=after_claim,
                        **potentials)
        if self.hil is not None:
            self.hil.end_episodes(ended)
        self.human = human
        self.ever_success |= info["success"]
        self.fired = claimed & ~ended
        if self.online is not None:
            self.online.push(final)
        if ended.any():
            ids = np.nonzero(ended)[0]
            for i in ids:
                self.finished.append((bool(self.ever_success[i]), float(info["episode_return"][i]),
                                      int(info["episode_length"][i])))
            if self.online is not None:  # the classifier's claim, and the simulator's verdict for the labeller
                self.online.end(ids, claimed[ids], self.ever_success[ids])
                self.online.start(ids, obs)
            self.ever_success[ids] = False
            self.history.reset(ids)
            self.queue.reset(ids)
            self.history.push(obs, ids)
            self.instruction = self._instructions()
            next_base[ids] = self.queue.next(self._base_input(), ids)
            if features is not None:  # the new episodes' first observations
                features = features.copy()
                features[ids] = self.policy.base_features({k: v[ids] for k, v in self._base_input().items()})
        self.obs = self.policy.inputs(obs, features)
        self.obs_dict = obs
        self.base = next_base

    def _base_reads_instruction(self) -> bool:
        base = self.policy.base
        return base is not None and bool(base.spec.instruction)

    def _instructions(self):
        """The envs' current episode instructions, when the base or the reward model reads them (else None)."""
        if not (self._base_reads_instruction() or (self.learned is not None and self.learned.reads_instruction)):
            return None
        from robot_rl.policies.base import check_instructions

        return check_instructions(getattr(self.env, "instruction", None), self.env.num_envs)

    def _base_input(self) -> dict:
        """What the base is queried with: the histories, and the instructions when it reads them."""
        if self.instruction is None or not self._base_reads_instruction():
            return self.history.data
        from robot_rl.policies.base import INSTRUCTION

        return {**self.history.data, INSTRUCTION: self.instruction}

    def pop_finished(self) -> list[tuple[bool, float, int]]:
        out, self.finished = self.finished, []
        return out
