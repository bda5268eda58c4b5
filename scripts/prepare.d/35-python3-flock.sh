#!/usr/bin/env bash
# python3 (the message test parses every built message with Python's `email`
# package) and util-linux's flock (the journal-lock test holds a lock from
# another process).
set -euo pipefail
. "$(dirname "$0")/lib.sh.inc"
command -v python3 >/dev/null || { say "python3 is missing: installing Debian's package"; apt_install python3; }
command -v flock >/dev/null || { say "flock is missing: installing util-linux"; apt_install util-linux; }
python3 --version
