"""The one exception type the stages raise for bad input.

Entry points turn it into a one-paragraph message and exit status 2, so users see what is
wrong and which file to look at instead of a traceback.
"""


class InputError(Exception):
    """Bad or missing user input (corpus, data dir, checkpoint). The message names the file
    and says what to do."""
