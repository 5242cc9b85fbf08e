#!/usr/bin/env bash
# Build crs-bridge's wheel, install it with pytest (from PyPI) in a throwaway virtual environment,
# and run tests/public/test_public_client.py there from a folder outside the repository: the
# public client and its pytest fixture work as a user installs them, not only from the sources.
# PYTHON: the interpreter to build the venv with (default python3); WHEEL_TEST_KEEP=1 keeps the
# folder for a look.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/crs-bridge-wheel.XXXXXX")
[[ ${WHEEL_TEST_KEEP:-} ]] && echo "kept: $work" || trap 'rm -rf "$work"' EXIT

# The build runs on a copy of the sources, so that no build/ or egg-info lands in the tree.
tar -C "$root" --exclude=.venv --exclude=.git --exclude=build --exclude='*.egg-info' -cf - . | (mkdir "$work/src" && tar -C "$work/src" -xf -)
"${PYTHON:-python3}" -m venv "$work/venv"
venv="$work/venv/bin"
"$venv/python" -m pip install --quiet --disable-pip-version-check --upgrade pip
"$venv/python" -m pip wheel --quiet --disable-pip-version-check --no-deps --wheel-dir "$work/dist" "$work/src"
"$venv/python" -m pip install --quiet --disable-pip-version-check "$work"/dist/crs_bridge-*.whl pytest

mkdir "$work/run" && cp "$root/tests/public/test_public_client.py" "$work/run/"
cd "$work/run"
"$venv/python" - <<'PY'
import sys
import crs_bridge.client
assert crs_bridge.client.__file__.startswith(sys.prefix), f"not the installed package: {crs_bridge.client.__file__}"
PY
"$venv/python" -m pytest -q -p no:cacheprovider test_public_client.py
