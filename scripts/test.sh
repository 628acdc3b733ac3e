#!/usr/bin/env bash
# The test command, here and in CI: install what is missing, make sure a Docker engine runs
# (the tests start etcd, SeaweedFS and Redis themselves on free ports), then run pytest.
# Extra arguments go to pytest, e.g. `scripts/test.sh tests/unit -x`.
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/install.sh

VENV=${DLAAS_VENV:-.venv}
state=${DLAAS_TEST_STATE:-$PWD/.dlaas/test}
mkdir -p "$state"
# The engine stays up afterwards: it is the machine's, and holds the image cache. Without
# one a developer's run goes on (the Docker tests skip and say why); in CI it is an error.
"$VENV/bin/python" -c "
import sys
from dlaas.local.dockerd import ensure_dockerd
from dlaas.local.processes import ServerError
try:
    print('test: docker engine on', ensure_dockerd(sys.argv[1]))
except ServerError as e:
    sys.exit(f'test: no Docker engine ({e}); Docker tests will be skipped')
" "$state" || [ "${CI:-}" != "true" ]

# Lint and format first: a minute of pytest is not spent on code that would not land.
"$VENV/bin/ruff" check .
"$VENV/bin/ruff" format --check .
# Dependencies point inward: the layer, purity and cycle contracts in pyproject.toml.
"$VENV/bin/lint-imports" --no-cache
# Types of the pure packages ([tool.mypy] in pyproject.toml names them).
"$VENV/bin/mypy"

exec "$VENV/bin/pytest" -q -ra -p no:cacheprovider --durations=15 "$@" </dev/null
