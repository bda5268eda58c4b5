#!/usr/bin/env bash
# Issue 41: the letter test scores every letter of fixtures/email-corpus,
# tracked and untracked, with Debian's SpamAssassin and rspamd (network tests
# off), and checks that text browsers (lynx, w3m) do not list the honeypot.
set -euo pipefail
. "$(dirname "$0")/lib.sh.inc"
missing=()
command -v spamassassin >/dev/null || missing+=(spamassassin)
command -v rspamadm >/dev/null || missing+=(rspamd)
command -v lynx >/dev/null || missing+=(lynx)
command -v w3m >/dev/null || missing+=(w3m)
if [ ${#missing[@]} -gt 0 ]; then
  say "installing ${missing[*]} from Debian's packages"
  apt_install "${missing[@]}"
fi
spamassassin --version | head -1
rspamadm --version 2>&1 | head -1
