#!/usr/bin/env bash
# Builds the documentation site into site/ (MkDocs + Material + mkdocstrings).
# Installs the pinned toolchain of docs/requirements.txt into .venv/docs (PyPI only);
# needs neither Rust nor MPI: the API reference is read from the sources and the stub
# python/cudecomp/_cudecomp.pyi, not from an installed package. Warnings are errors.
# Usage: bash scripts/docs.sh [extra mkdocs build options]
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PYTHON=${PYTHON:-python3}
VENV="$ROOT/.venv/docs"
export PIP_DISABLE_PIP_VERSION_CHECK=1 NO_MKDOCS_2_WARNING=1

[ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"
"$VENV/bin/pip" install -q -r "$ROOT/docs/requirements.txt"
cd "$ROOT"
"$VENV/bin/mkdocs" build --strict -d site "$@"
echo "docs: open $ROOT/site/index.html"
