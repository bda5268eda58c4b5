#!/usr/bin/env bash
# MariaDB (or MySQL) on 127.0.0.1:3306, root with an empty password.
set -euo pipefail
. "$(dirname "$0")/lib.sh.inc"
mysql_up() { mysqladmin --user=root --host=127.0.0.1 --port=3306 ping >/dev/null 2>&1; }
if ! mysql_up; then
  say "MariaDB is down: starting it"
  command -v start-stop-daemon >/dev/null && [ -x /usr/sbin/mariadbd ] \
    || die "MariaDB is not running on 127.0.0.1:3306 and /usr/sbin/mariadbd is not installed (apt-get install mariadb-server)"
  start-stop-daemon --start --oknodo --background --exec /usr/sbin/mariadbd
  for _ in $(seq 1 60); do mysql_up && break; sleep 1; done
fi
mysql_up || die "MariaDB did not answer on 127.0.0.1:3306 within 60 s (user root, empty password)"
mysql --user=root --host=127.0.0.1 -N -e 'SELECT VERSION()'
