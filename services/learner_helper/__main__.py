"""`python3 -m services.learner_helper`: see services.learner_helper.main.

The finish signals are caught before the heavy imports (boto3 takes a few hundred ms):
a SIGUSR1/SIGTERM that comes while the helper is still starting must not kill it
before it has stored the logs. The fast start of a restarted gang (resume.py) comes
before those imports too.
"""

import os
import signal
import sys
import threading
import time

STARTED = time.monotonic()  # the helper's "data ready after" line counts the imports too
STOP = threading.Event()


def print_line(message: str) -> None:
    print(f"helper: {message}", flush=True)


def _on_signal(_signum, _frame) -> None:
    STOP.set()


for _sig in (signal.SIGUSR1, signal.SIGTERM):
    signal.signal(_sig, _on_signal)

# Standard library only: a gang restarted on a volume its last run left current starts
# training before boto3 is imported (see resume.py).
from services.learner_helper.resume import fast_start  # after the handlers, on purpose

RESUMED = not STOP.is_set() and fast_start(dict(os.environ), print_line, STARTED)

from services.learner_helper.main import run  # after the handlers, on purpose

sys.exit(run(dict(os.environ), stop=STOP, started=STARTED, resumed=RESUMED))
