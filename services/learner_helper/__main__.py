"""`python3 -m services.learner_helper`: see services.learner_helper.main."""

import sys

from services.learner_helper.main import main

sys.exit(main())
