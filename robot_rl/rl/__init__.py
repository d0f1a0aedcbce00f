"""Residual off-policy RL on a frozen base policy (the policy itself, ResidualPolicy, is in policies/residual.py).

    critic.py     EnsembleCritic: N Q-heads in one batched pass
    replay.py     time-major ring replay, n-step targets, demo buffer relabeled with the base's actions
    learner.py    TD3-style update (ensemble targets, smoothing, delay, warm-up, clipping)
    rollout.py    vectorized collection over a BatchedEnv
    train.py      the training workspace (checkpoints, resume, evaluation, logs); RL from scratch too
    distributed/  the same training with actor processes on Ray (distributed.actors=N): sequence-numbered
                  transition batches, weight sync, actor restarts, learner resume without duplicates
                  (config, cluster, actors, pool, evaluator, ledger, workspace; see its __init__)
"""
