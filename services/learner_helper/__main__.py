"""`python3 -m services.learner_helper`: see services.learner_helper.main.

The finish signals are caught before the heavy imports (boto3 takes a few hundred ms):
a SIGUSR1/SIGTERM that comes while the helper is still starting must not kill it
before it has stored the logs.
"""

import os
import signal
import sys
import threading

STOP = threading.Event()


def _on_signal(_signum, _frame) -> None:
    STOP.set()


for _sig in (signal.SIGUSR1, signal.SIGTERM):
    signal.signal(_sig, _on_signal)

from services.learner_helper.main import run  # after the handlers, on purpose

sys.exit(run(dict(os.environ), stop=STOP))
