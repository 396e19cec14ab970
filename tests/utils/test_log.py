"""asr/utils/log.py: log_to_stderr, the tools' set-up, leaves a caller's logging as it is."""

import logging
import subprocess
import sys


def test_a_tool_logs_info_on_stderr_in_the_stages_format():
    code = "import logging; from asr.utils.log import log_to_stderr; log_to_stderr(); "
    code += "logging.getLogger('asr.x').info('hi')"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert proc.stdout == "" and proc.stderr.rstrip().endswith("INFO [asr.x] hi")


def test_a_callers_handlers_and_level_stay():
    from asr.utils.log import log_to_stderr

    root = logging.getLogger()
    handler = logging.NullHandler()
    handlers, level = list(root.handlers), root.level
    root.addHandler(handler)
    root.setLevel(logging.WARNING)
    try:
        log_to_stderr()
        assert root.level == logging.WARNING and root.handlers == [*handlers, handler]
    finally:
        root.removeHandler(handler)
        root.setLevel(level)
