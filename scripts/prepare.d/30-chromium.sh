#!/usr/bin/env bash
# Debian's Chromium: the dashboard test renders the page in a real browser.
set -euo pipefail
. "$(dirname "$0")/lib.sh.inc"
command -v chromium >/dev/null || { say "chromium is missing: installing Debian's package"; apt_install chromium; }
chromium --version
