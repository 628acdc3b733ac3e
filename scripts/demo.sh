#!/usr/bin/env bash
# The README's first command: install, bring the platform up on its embedded default (Docker
# engine, etcd, SeaweedFS S3, SQLite, the four services), upload scikit-learn's digits as
# training data, and run the digits example to COMPLETED, streaming its logs.
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/install.sh
DLAAS=.venv/bin/dlaas

$DLAAS up
data=$(mktemp -d)
trap 'rm -rf "$data"' EXIT
.venv/bin/python examples/digits/prepare.py --out "$data"
$DLAAS data upload digits-data "$data/digits.npz"
$DLAAS submit examples/digits/manifest.yaml --code examples/digits --follow
echo "demo: the trained model and logs: .venv/bin/dlaas download <job id> -o results/"
