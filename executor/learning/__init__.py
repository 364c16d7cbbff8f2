"""The learner: policy-gradient steps, losses, corrections, advantages, checkpoints, evaluation."""
