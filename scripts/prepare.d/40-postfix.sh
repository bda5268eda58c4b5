#!/usr/bin/env bash
# Postfix: the delivery tests hand letters to real SMTP servers they start
# themselves on free loopback ports: Postfix's smtp-sink, and private
# Postfix instances (tests/it/common/postfix.rs: their own configuration,
# queue and maildir in a temporary directory; STARTTLS with a certificate
# made by openssl, AUTH through Cyrus SASL's sasldb), and swaks, an SMTP
# client the relay's tests submit with. No Postfix daemon is
# started or configured on the machine itself.
set -euo pipefail
. "$(dirname "$0")/lib.sh.inc"
if ! command -v postfix >/dev/null && [ ! -x /usr/sbin/postfix ]; then
  say "postfix is missing: installing Debian's postfix (no configuration)"
  command -v debconf-set-selections >/dev/null \
    && echo "postfix postfix/main_mailer_type select No configuration" | debconf-set-selections
  apt_install postfix
fi
missing=()
command -v saslpasswd2 >/dev/null || [ -x /usr/sbin/saslpasswd2 ] || missing+=(sasl2-bin)
ls /usr/lib/*/sasl2/libplain.so >/dev/null 2>&1 || missing+=(libsasl2-modules)
ls /usr/lib/*/sasl2/libsasldb.so >/dev/null 2>&1 || missing+=(libsasl2-modules-db)
command -v openssl >/dev/null || missing+=(openssl)
command -v swaks >/dev/null || missing+=(swaks)
if [ ${#missing[@]} -gt 0 ]; then
  say "for the Postfix instances' AUTH and STARTTLS, and swaks (the relay's tests' client): installing ${missing[*]}"
  apt_install "${missing[@]}"
fi
getent passwd postfix >/dev/null || die "Debian's postfix package left no 'postfix' user"
say "smtp-sink: $(command -v smtp-sink || echo /usr/sbin/smtp-sink)"
say "postfix: $(/usr/sbin/postconf -d -h mail_version 2>/dev/null || echo '?'), saslpasswd2: $(command -v saslpasswd2 || echo /usr/sbin/saslpasswd2)"
