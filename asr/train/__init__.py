"""Training: data loading and bucketing, the updater, schedules, checkpoints, the loop."""
