import sys
from pathlib import Path

# The toy corpus writer lives with the training tests; decoding tests use it too.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "train"))
