#!/usr/bin/env bash
# Install what the platform and its tests need on a Debian 12 machine (as root), idempotently:
# the servers from Debian's archive (Docker engine, etcd, Redis, docker-compose, debootstrap,
# iptables) and Chromium for the dashboard's browser test, then a virtualenv in .venv with
# the project installed editable with its test and examples extras.
# A second run changes nothing and takes a second: packages present are not reinstalled and
# pip runs again only when pyproject.toml changed.
set -euo pipefail
cd "$(dirname "$0")/.."

export DEBIAN_FRONTEND=noninteractive
PY=${PYTHON:-python3}
VENV=${DLAAS_VENV:-.venv}

log() { printf 'install: %s\n' "$*"; }

# --- system packages ----------------------------------------------------------------------
# binary to check -> Debian package that provides it
declare -A PACKAGES=(
  [dockerd]=docker.io
  [etcd]=etcd-server
  [redis-server]=redis-server
  [docker-compose]=docker-compose
  [debootstrap]=debootstrap
  [iptables]=iptables  # dlaas up fences job containers in with host firewall rules
  [sysctl]=procps      # the swarm lab turns on bridged-frame filtering in its nodes
  # The dashboard's browser test drives Debian's Chromium through Playwright (a test
  # dependency); `playwright install` is never run: its browser download fails here.
  [chromium]=chromium
)
missing=()
for bin in "${!PACKAGES[@]}"; do
  if ! command -v "$bin" >/dev/null 2>&1 && [ ! -x "/usr/sbin/$bin" ] && [ ! -x "/usr/bin/$bin" ]; then
    missing+=("${PACKAGES[$bin]}")
  fi
done
if ! "$PY" -c 'import venv, ensurepip' >/dev/null 2>&1; then
  missing+=(python3-venv)
fi
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "install: missing packages ${missing[*]}; run as root or install them first" >&2
    exit 1
  fi
  # Keep the packages' init scripts from starting daemons on fixed ports: the platform and
  # the tests start their own servers on free ports.
  made_policy=0
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d
    chmod +x /usr/sbin/policy-rc.d
    made_policy=1
  fi
  log "apt-get install ${missing[*]}"
  apt-get update -q </dev/null
  apt-get install -y -q "${missing[@]}" </dev/null
  if [ "$made_policy" = 1 ]; then rm -f /usr/sbin/policy-rc.d; fi
else
  log "system packages present"
fi

# --- Python -------------------------------------------------------------------------------
if ! "$PY" -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
  echo "install: $PY is $("$PY" --version 2>&1); dlaas needs Python >= 3.11 (set PYTHON=...)" >&2
  exit 1
fi
if [ ! -x "$VENV/bin/python" ]; then
  log "creating $VENV"
  "$PY" -m venv "$VENV"
fi
stamp="$VENV/.dlaas-installed"
want=$(sha256sum pyproject.toml | cut -d' ' -f1)
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ] || ! "$VENV/bin/python" -c 'import dlaas' 2>/dev/null; then
  log "pip install -e '.[test,examples]'"
  "$VENV/bin/python" -m pip install -q --disable-pip-version-check -e '.[test,examples]' </dev/null
  echo "$want" > "$stamp"
else
  log "python packages up to date"
fi
log "done"
