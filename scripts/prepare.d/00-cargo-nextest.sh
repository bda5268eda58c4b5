#!/usr/bin/env bash
set -euo pipefail
. "$(dirname "$0")/lib.sh.inc"
command -v cargo >/dev/null || die "cargo is missing: this machine has no Rust toolchain (https://rustup.rs)"
if ! command -v cargo-nextest >/dev/null; then
  say "cargo-nextest is missing: installing it from crates.io"
  cargo install --locked cargo-nextest || die "could not install cargo-nextest"
fi
cargo nextest --version | head -1
