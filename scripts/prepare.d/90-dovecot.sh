#!/usr/bin/env bash
# Issue 58: `bounces fetch` is tested against real Dovecot IMAP and POP3
# servers the test starts itself (tests/it/common/dovecot.rs: their own
# configuration, state, log and maildir in a temporary directory, TLS with
# a certificate made by openssl, on free loopback ports). No Dovecot
# daemon is started or configured on the machine itself; the package's
# service is not needed.
set -euo pipefail
. "$(dirname "$0")/lib.sh.inc"
missing=()
[ -x /usr/sbin/dovecot ] || missing+=(dovecot-core)
[ -x /usr/lib/dovecot/imap ] || missing+=(dovecot-imapd)
[ -x /usr/lib/dovecot/pop3 ] || missing+=(dovecot-pop3d)
command -v openssl >/dev/null || missing+=(openssl)
if [ ${#missing[@]} -gt 0 ]; then
  say "for the mailbox tests: ${missing[*]} missing, installing Debian's ${missing[*]}"
  apt_install "${missing[@]}"
fi
getent passwd dovenull >/dev/null || die "Debian's dovecot-core left no 'dovenull' user"
getent passwd mail >/dev/null || die "no 'mail' user: the test's mailboxes belong to it"
say "dovecot: $(/usr/sbin/dovecot --version 2>/dev/null || echo '?')"
