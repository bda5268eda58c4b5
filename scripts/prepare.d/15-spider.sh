#!/usr/bin/env bash
# MariaDB's Spider engine and the server binaries the cluster tests run: each
# of them starts a throwaway head and two data nodes (mariadb-install-db into
# temporary directories, mariadbd on free ports); `linktrack migrate` loads
# Spider on the head with INSTALL SONAME 'ha_spider'.
set -euo pipefail
. "$(dirname "$0")/lib.sh.inc"
plugin_dir=$(mysql --user=root --host=127.0.0.1 -N -e 'SELECT @@plugin_dir' 2>/dev/null || echo /usr/lib/mysql/plugin/)
if [ ! -e "${plugin_dir%/}/ha_spider.so" ]; then
  say "Spider (ha_spider.so) is missing from $plugin_dir: installing mariadb-plugin-spider"
  apt_install mariadb-plugin-spider
fi
[ -e "${plugin_dir%/}/ha_spider.so" ] || die "ha_spider.so is still missing from $plugin_dir after installing mariadb-plugin-spider"
for tool in mariadb-install-db mariadbd; do
  command -v "$tool" >/dev/null || [ -x "/usr/sbin/$tool" ] \
    || die "$tool is missing: the cluster tests start their own servers (apt-get install mariadb-server)"
done
say "Spider: ${plugin_dir%/}/ha_spider.so"
