#!/usr/bin/env bash
# Redis on 127.0.0.1:6379 (the live-statistics tests).
set -euo pipefail
. "$(dirname "$0")/lib.sh.inc"
redis_up() { redis-cli -h 127.0.0.1 -p 6379 ping 2>/dev/null | grep -q PONG; }
if ! redis_up; then
  say "Redis is down: starting it"
  command -v redis-server >/dev/null || apt_install redis-server
  mkdir -p /var/lib/redis /var/log/redis
  redis-server --daemonize yes --bind 127.0.0.1 -::1 --port 6379 --save "" --appendonly no \
    --dir /var/lib/redis --logfile /var/log/redis/ci.log
  for _ in $(seq 1 30); do redis_up && break; sleep 1; done
fi
redis_up || die "Redis did not answer on 127.0.0.1:6379 within 30 s"
say "Redis answers on 127.0.0.1:6379"
