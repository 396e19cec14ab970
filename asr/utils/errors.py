"""The one exception type the stages raise for bad input.

Entry points turn it into a one-paragraph message and exit status 2, so users see what is
wrong and which file to look at instead of a traceback.
"""


class InputError(Exception):
    """Bad or missing user input (corpus, data dir, checkpoint). The message names the file
    and says what to do."""


def error_detail(err: BaseException) -> str:
    """An exception as a few words for a one-line message: its text's first line, or its type
    where it has none (kaldiio's bare `assert` on a truncated ark)."""
    text = (str(err).strip().splitlines() or [""])[0]
    return f"{type(err).__name__}: {text}" if text else f"{type(err).__name__}, the file is truncated or damaged"
