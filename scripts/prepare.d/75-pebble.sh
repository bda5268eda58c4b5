#!/usr/bin/env bash
# Issue 41: `domains verify` is tested against pebble-challtestsrv (Debian's
# pebble package), which answers DNS for the test domains on loopback.
set -euo pipefail
. "$(dirname "$0")/lib.sh.inc"
command -v pebble-challtestsrv >/dev/null || { say "pebble-challtestsrv is missing: installing Debian's pebble package"; apt_install pebble; }
command -v pebble-challtestsrv
