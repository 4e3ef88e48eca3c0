#!/usr/bin/env bash
# Makes (once) the Python environment the dense-retrieval reference and benchmark scripts use:
# torch, sentence-transformers and faiss-cpu from PyPI in ${ST_VENV:-~/.cache/ragtime/st-venv}. Prints its python.
set -euo pipefail
VENV="${ST_VENV:-${RAGTIME_CACHE:-$HOME/.cache/ragtime}/st-venv}"
if [[ ! -x "$VENV/bin/python" ]] || ! "$VENV/bin/python" -c "import sentence_transformers, faiss" 2>/dev/null; then
  echo "st_venv: installing torch, sentence-transformers, faiss-cpu into $VENV ..." >&2
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install --quiet --disable-pip-version-check torch sentence-transformers faiss-cpu >&2
fi
echo "$VENV/bin/python"
