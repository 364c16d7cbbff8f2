"""asyncrl: plan, run and check asynchronous RL schedules for language models."""

__version__ = "0.1.0"
