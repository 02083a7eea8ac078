#!/usr/bin/env bash
# The lowest supported versions, tested: a fresh virtual environment with every `>=` floor of pyproject.toml's
# runtime and [test] requirements installed at its release series (`name>=X.Y` becomes `name==X.Y.*`, `name>=X`
# becomes `name==X.0.*`: the floor's newest patch release), xmask installed on top without dependencies, then
# the fast tests (the slow end-to-end ones left out).
#
#   benchmarks/lowest_versions.sh [VENV]        # default VENV: /tmp/xmask-lowest (recreated)
#
# Needs the package index (it downloads torch and the rest: minutes, about 2 GB on disk) and a Python the
# floors have wheels for (3.10 or 3.11; PYTHON=python3.10 to choose). torch comes from TORCH_INDEX, the CPU
# builds by default: a bare `torch` requirement pulls a CUDA build. Extra pytest arguments: PYTEST_ARGS.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${1:-/tmp/xmask-lowest}"
PYTHON="${PYTHON:-python3}"
# TORCH_INDEX= (set, empty) takes torch from pip's own index instead (on Linux x86_64 a CUDA build, ~2.5 GB).
TORCH_INDEX="${TORCH_INDEX-https://download.pytorch.org/whl/cpu}"
TORCH_PIP=(); [ -n "$TORCH_INDEX" ] && TORCH_PIP=(--index-url "$TORCH_INDEX")
REST_PIP=(); [ -n "$TORCH_INDEX" ] && REST_PIP=(--extra-index-url "$TORCH_INDEX")
export PIP_DISABLE_PIP_VERSION_CHECK=1

"$PYTHON" -m venv --clear "$VENV"
. "$VENV/bin/activate"
# The floors, read from pyproject.toml's [project] dependencies and its test extra (a regex: Python 3.10 has
# no tomllib). A requirement without a floor is left out: the newest version is the only one to test.
python - > "$VENV/lowest.txt" <<'PY'
import re

text = open("pyproject.toml").read()
deps = re.search(r"^dependencies = \[(.*?)^\]", text, re.S | re.M).group(1)
test = re.search(r"^test = \[(.*?)\]", text, re.S | re.M).group(1)  # the list may span lines
for name, floor in re.findall(r'"([A-Za-z0-9_.-]+)(?:\[[^\]]*\])?>=([0-9][^,"\s;]*)', deps + test):
    print(f"{name}=={floor if '.' in floor else floor + '.0'}.*")
PY
echo "lowest supported versions:"; sed 's/^/  /' "$VENV/lowest.txt"
TORCH="$(grep -i '^torch==' "$VENV/lowest.txt")"
pip install --quiet "$TORCH" "${TORCH_PIP[@]}"
pip install --quiet -r "$VENV/lowest.txt" "${REST_PIP[@]}"
pip install --quiet --no-deps .
pip check
python -c "import xmask_cli.versions as v, json; print(json.dumps(v.package_versions(v.RUN_PACKAGES + v.OTHER_PACKAGES)))"
# The fast subset: every test but the end-to-end `slow` ones; from the checkout's tests against the install.
python -m pytest -q -m "not slow" -p no:cacheprovider ${PYTEST_ARGS:-} tests
