"""Learned rewards: a progress model Phi(obs[, instruction]) -> [0, 1], a success classifier with a calibrated
threshold, and the potential-based reward wrapper residual RL uses with reward=learned.

    robot-rl-train-reward task=lift data=DEMOS rollouts=ROLLOUTS      # -> <run dir>/reward_model/
    model = load_reward_model(run_dir)
    reward = LearnedReward(model, gamma=0.99, shaping=1.0)            # r = r_success + 1.0 (0.99 Phi' - Phi)
"""

from robot_rl.reward.model import RewardModel, RewardSpec, load_reward_model
from robot_rl.reward.shaping import LearnedReward, potential_shaping

__all__ = ["RewardModel", "RewardSpec", "load_reward_model", "LearnedReward", "potential_shaping"]
