#!/usr/bin/env bash
# RabbitMQ on 127.0.0.1:5672, guest/guest (the AMQP publisher tests of
# `linktrack serve` with LINKTRACK_AMQP_URL).
set -euo pipefail
. "$(dirname "$0")/lib.sh.inc"
rabbitmq_up() { (exec 3<>/dev/tcp/127.0.0.1/5672) 2>/dev/null; }
if ! rabbitmq_up; then
  say "RabbitMQ does not answer on 127.0.0.1:5672: starting it"
  command -v rabbitmq-server >/dev/null || apt_install rabbitmq-server
  command -v rabbitmq-server >/dev/null || die "rabbitmq-server is missing (apt-get install rabbitmq-server)"
  rabbitmq-server -detached
  for _ in $(seq 1 60); do rabbitmq_up && break; sleep 1; done
fi
rabbitmq_up || die "RabbitMQ did not answer on 127.0.0.1:5672 within 60 s (see /var/log/rabbitmq)"
say "RabbitMQ answers on 127.0.0.1:5672"
