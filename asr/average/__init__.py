"""Checkpoint averaging (`python -m asr.average`): the mean of an experiment's last or best
checkpoints, as icefall and ESPnet decode with (see asr/average/average.py)."""
