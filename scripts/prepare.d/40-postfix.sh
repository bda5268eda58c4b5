#!/usr/bin/env bash
# Postfix's smtp-sink: the delivery tests hand every letter to a real SMTP
# server they start on a free port (no Postfix daemon is started or
# configured on the machine).
set -euo pipefail
. "$(dirname "$0")/lib.sh.inc"
if ! command -v smtp-sink >/dev/null && [ ! -x /usr/sbin/smtp-sink ]; then
  say "smtp-sink is missing: installing Debian's postfix (no configuration)"
  command -v debconf-set-selections >/dev/null \
    && echo "postfix postfix/main_mailer_type select No configuration" | debconf-set-selections
  apt_install postfix
fi
say "smtp-sink: $(command -v smtp-sink || echo /usr/sbin/smtp-sink)"
