"""Small helpers shared by every stage: atomic file output and logging."""
