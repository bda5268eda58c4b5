#!/usr/bin/env bash
# The API's tests check the OpenAPI description with openapi-spec-validator
# and fuzz the live API with Schemathesis (`st run`), both from PyPI, in a
# virtual environment of their own (LINKTRACK_PYTOOLS, default
# /opt/linktrack-pytools) so the system's Python is left as it is.
set -euo pipefail
. "$(dirname "$0")/lib.sh.inc"
venv="${LINKTRACK_PYTOOLS:-/opt/linktrack-pytools}"
command -v python3 >/dev/null || { say "python3 is missing: installing Debian's package"; apt_install python3; }
if ! python3 -c 'import venv, ensurepip' 2>/dev/null; then
  say "python3's venv module is missing: installing python3-venv"
  apt_install python3-venv
fi
if [ ! -x "$venv/bin/st" ] || ! "$venv/bin/python" -c 'import openapi_spec_validator' 2>/dev/null; then
  say "installing schemathesis and openapi-spec-validator from PyPI into $venv"
  python3 -m venv "$venv" || die "could not make a virtual environment at $venv"
  "$venv/bin/python" -m pip install --quiet --upgrade pip \
    || die "could not upgrade pip in $venv (is PyPI reachable?)"
  "$venv/bin/python" -m pip install --quiet 'schemathesis>=3.39,<5' 'openapi-spec-validator>=0.7,<1' httpx \
    || die "could not install schemathesis and openapi-spec-validator from PyPI into $venv: the API's description and fuzz tests will say they are skipped"
fi
"$venv/bin/st" --version | head -1
"$venv/bin/python" -c 'import openapi_spec_validator, importlib.metadata as m; print("openapi-spec-validator", m.version("openapi-spec-validator"))'
