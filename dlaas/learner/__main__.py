"""`python3 -m dlaas.learner -- <command>` is the same as `python3 -m dlaas.learner.run -- <command>`."""

import sys

from dlaas.learner.run import main

sys.exit(main())
