# Build: docker build -t linktrack .   (used by docker-compose.yml)
FROM rust:1-bookworm AS build
WORKDIR /src
COPY . .
RUN cargo build --release --locked && cp target/release/linktrack /usr/local/bin/linktrack

FROM debian:bookworm-slim
RUN apt-get update && apt-get install -y --no-install-recommends ca-certificates && rm -rf /var/lib/apt/lists/*
COPY --from=build /usr/local/bin/linktrack /usr/local/bin/linktrack
COPY fixtures /srv/fixtures
WORKDIR /srv
ENTRYPOINT ["linktrack"]
