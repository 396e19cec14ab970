"""Optimisation below training and distributed training: optimizers, the learning-rate
schedule, and the Updater (one mini-batch loss -> one parameter update) that the distributed
algorithms extend."""
