"""Fault injection: bad input and interruptions, each ending in one message (exit 2) or handled.

Issue 17's list, and where each item is tested (besides the unit tests of each module):
  3 recipe options as one word, integers checked, replayable log  tests/recipes/test_recipe_sh.py,
                                                                   tests/recipes/test_swb300_recipe.py
  4 score=hub5 without stm or GLM                                  tests/faults/test_scoring_faults.py
  5 non-finite features                                            tests/faults/test_non_finite.py
  6 commands in data files                                         tests/faults/test_data_commands.py
  7 non-UTF-8 text, bad SPHERE headers, config values              tests/faults/test_input_errors.py,
                                                                   tests/test_config.py
    disk full at a checkpoint and at features (a small tmpfs)      tests/faults/test_disk_full.py
  8 leftovers of a killed stage, changed overrides of a done stage, unreadable recordings,
    empty transcripts                                              tests/faults/test_leftovers.py,
                                                                   tests/recipes/test_recipe_sh.py
  1, 2 experiment state written once true, train.restart, best.pt fallback, the log never mixed
                                                                   tests/faults/test_training_state.py
    non-finite training losses: the utterance left out, named      tests/train/test_loop.py
Issue 30, item 1: a killed decentralized learner's resume loses and repeats no batch
                                                                   tests/faults/test_resume_claims.py

Issue 31:
  1 preemption: SIGTERM/SIGUSR1 save and exit 75, exact resume    tests/faults/test_preemption.py,
    (one learner, SSGD, ADPSGD; data stages), sbatch requeue       tests/faults/test_preemption_torchrun.py,
                                                                   tests/distributed/test_slurm_script.py
  2 one training per experiment (train.lock)                       tests/faults/test_experiment_lock.py
  3 truncated cmvn.ark, feats.ark, tokenizer model                 tests/faults/test_damaged_files.py
  4 a hung learner named within minutes                            tests/faults/test_hang.py
"""
