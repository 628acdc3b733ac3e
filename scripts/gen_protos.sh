#!/usr/bin/env bash
# Regenerate the gRPC stubs in dlaas/v1 from protos/. CI fails when the committed stubs differ.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python}
$PY -m grpc_tools.protoc -I protos --python_out=. --pyi_out=. --grpc_python_out=. protos/dlaas/v1/*.proto
