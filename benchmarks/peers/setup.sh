#!/usr/bin/env bash
# The peers' environments, from the package index only, with pinned versions:
#   .venvs/torch       PyTorch (requirements-torch.txt)
#   .venvs/keras-hub   keras-hub on the package's TensorFlow and Keras (requirements-keras-hub.txt
#                     under ../../constraints.txt)
# CTranslate2 needs none: the package's own .venv has it (constraints.txt pins it; make test
# or make demo makes that venv). A venv whose requirements have not changed since it was
# made is kept; a failed or interrupted install is made again by the next run. $PEER_VENVS moves them (default:
# benchmarks/peers/.venvs, ignored by git). About 3-5 minutes the first time.
#
#   bash benchmarks/peers/setup.sh
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(dirname "$(dirname "$here")")"
venvs="${PEER_VENVS:-$here/.venvs}"
python="${PYTHON:-python3}"
mkdir -p "$venvs"

make_venv() {  # NAME REQUIREMENTS [PIP OPTIONS...]
    local name="$1" requirements="$2" stamp wanted
    shift 2
    stamp="$venvs/$name/.requirements"
    wanted="$(cat "$requirements" "$@" 2>/dev/null | grep -v "^ *#" | sha256sum)"  # comments changed: kept
    if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$wanted" ]; then
        echo "$name: ready ($venvs/$name)"
        return
    fi
    # the stamp is written last: a venv without it (an install cut short) is made again
    rm -rf "$venvs/$name"
    echo "$name: installing $(grep -v '^#' "$requirements" | tr '\n' ' ')(log: $venvs/$name.log)"
    "$python" -m venv "$venvs/$name"
    local options=()
    [ $# -eq 0 ] || options=(-c "$1")
    if ! { "$venvs/$name/bin/python" -m pip install --upgrade pip \
            && "$venvs/$name/bin/python" -m pip install "${options[@]}" -r "$requirements"; } > "$venvs/$name.log" 2>&1; then
        tail -n 20 "$venvs/$name.log"
        rm -rf "$venvs/$name"
        echo "error: installing the $name peer failed; the whole log is $venvs/$name.log" >&2
        exit 1
    fi
    "$venvs/$name/bin/python" -m pip freeze > "$venvs/$name/versions.txt"
    echo "$wanted" > "$stamp"
    echo "$name: ready ($venvs/$name; versions in versions.txt)"
}

make_venv torch "$here/requirements-torch.txt"
make_venv keras-hub "$here/requirements-keras-hub.txt" "$repo/constraints.txt"
[ -x "$repo/.venv/bin/python" ] || echo "note: the CTranslate2 peer runs in the package's .venv: make test (or make demo) makes it"
