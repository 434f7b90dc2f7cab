#!/usr/bin/env bash
# setup.sh: a Python virtual environment with the Dask this example needs (requirements.txt,
# pinned), made once under ~/.cache/rivet and reused; prints its python's path.
#
# The directory's name is keyed on the requirements and the Python version, so a change of
# either makes a new one. It is built under a temporary name and renamed into place only when
# every package installed, so a failed install leaves nothing that looks ready: the next run
# tries again, and this run fails (exit 1) with pip's error. It never skips silently.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
python=${PYTHON:-python3}
command -v "$python" >/dev/null ||
    { echo "fleet/setup.sh: $python is missing (install python3 and python3-venv)" >&2; exit 1; }
version=$("$python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
key=$( (cat "$here/requirements.txt"; echo "$version") | sha256sum | cut -c1-12)
venv=${RIVET_CACHE:-$HOME/.cache/rivet}/fleet-venv-$key
if [[ ! -x $venv/bin/python ]]; then
    echo "fleet/setup.sh: installing $(tr '\n' ' ' <"$here/requirements.txt")into $venv" >&2
    rm -rf -- "$venv.partial"
    "$python" -m venv "$venv.partial" ||
        { echo "fleet/setup.sh: cannot create a venv (install python3-venv)" >&2; exit 1; }
    "$venv.partial/bin/python" -m pip install -q --disable-pip-version-check \
        -r "$here/requirements.txt" ||
        { echo "fleet/setup.sh: pip could not install $here/requirements.txt" >&2; exit 1; }
    "$venv.partial/bin/python" -c 'import dask.distributed' ||
        { echo "fleet/setup.sh: dask.distributed does not import after installing" >&2; exit 1; }
    mv -T -- "$venv.partial" "$venv"
fi
# A moved venv's python still finds its packages (pyvenv.cfg sits beside it); only its
# scripts' #! lines name the old path, and this example runs none of them.
echo "$venv/bin/python"
