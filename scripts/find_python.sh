#!/bin/sh
# find_python.sh [MIN [BELOW]]: print the path of a Python with MIN <= version < BELOW (default 3.12 and 3.14),
# or say in one line what to install and fail. Tried in order: $PYTHON, python3.MINOR for each minor in range
# (oldest first: the main lock was resolved on 3.12), python3, then pyenv's and uv's installs. pyenv's shims of
# versions that are installed but not selected fail to run, so each candidate is run, not just found.
MIN=${1:-3.12}
BELOW=${2:-3.14}
ok() {  # ok PROGRAM: it runs and its version is in [MIN, BELOW)
  "$1" -c "import sys; v = lambda s: tuple(map(int, s.split('.')))
sys.exit(not (v('$MIN') <= sys.version_info[:2] < v('$BELOW')))" >/dev/null 2>&1
}
minors=$(seq "${MIN#3.}" $(( ${BELOW#3.} - 1 )))
candidates=${PYTHON:-}
for m in $minors; do candidates="$candidates python3.$m"; done
candidates="$candidates python3"
for m in $minors; do
  candidates="$candidates ${PYENV_ROOT:-$HOME/.pyenv}/versions/3.$m.*/bin/python3 $HOME/.local/share/uv/python/cpython-3.$m.*/bin/python3"
done
for candidate in $candidates; do
  if ok "$candidate"; then command -v "$candidate"; exit 0; fi
done
echo "make: no Python >= $MIN and < $BELOW found: install one (apt-get install python$MIN-venv, pyenv install $MIN, or uv python install $MIN), or run make PYTHON=/path/to/python$MIN" >&2
exit 1
