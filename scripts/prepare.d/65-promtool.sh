#!/usr/bin/env bash
# Debian's prometheus ships promtool: a test checks deploy/prometheus/alerts.yml
# with `promtool check rules` and runs its unit tests with `promtool test rules`.
set -euo pipefail
. "$(dirname "$0")/lib.sh.inc"
command -v promtool >/dev/null || { say "promtool is missing: installing Debian's prometheus package"; apt_install prometheus; }
promtool --version 2>&1 | head -1
