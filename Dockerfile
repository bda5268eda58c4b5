# Build: docker build -t linktrack .   (docker-compose.yml builds it too)
# Stage 1 compiles; stage 2 is the runtime: Debian slim, the binary, the
# fixtures, curl for the health check, and a user of its own (never root).
FROM rust:1-bookworm AS build
WORKDIR /src
COPY . .
# The install step of docs/deploy.md: /usr/local/bin/linktrack.
RUN cargo install --path . --locked --root /usr/local

FROM debian:bookworm-slim
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates curl \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --system --uid 10001 --home-dir /var/lib/linktrack --shell /usr/sbin/nologin linktrack \
 && mkdir -p /var/lib/linktrack/journal \
 && chown -R linktrack:linktrack /var/lib/linktrack
COPY --from=build /usr/local/bin/linktrack /usr/local/bin/linktrack
COPY fixtures /srv/fixtures
WORKDIR /srv
USER linktrack:linktrack
EXPOSE 8080 9464
ENTRYPOINT ["linktrack"]
