#!/usr/bin/env bash
# Debian's docker-compose: a test validates docker-compose.yml with
# `docker-compose config` (no Docker engine needed for that).
set -euo pipefail
. "$(dirname "$0")/lib.sh.inc"
command -v docker-compose >/dev/null || { say "docker-compose is missing: installing Debian's package"; apt_install docker-compose; }
docker-compose version --short
