#!/usr/bin/env bash
# The GPU checks, as one script for a machine with a CUDA GPU and its own Python (torch, numpy, opencv,
# matplotlib, pytest; no Ray, Gymnasium, ale-py or pydantic, and no package index). Two steps:
#
#   bench/gpu_check.sh wheels             # HERE, with pip: the missing wheels for Python 3.12 into .whl/
#   bench/gpu_check.sh tests scaling      # THERE: the CUDA tests, then the env-thread scaling curve
#   bench/gpu_check.sh pong               # THERE: PPO on Pong to a 100-game mean of 18 (PONG_CAP seconds)
#   bench/gpu_check.sh tests overlap pong # THERE: the CUDA tests; env groups (rollouts.envGroups) against one
#                                         # group at the example's batch, into $OUT/overlap; then Pong with the
#                                         # fastest of those settings
#
# Steps run in the order named; each writes into $OUT (the device tool's folder; default ./bench-gpu-out):
# cuda-tests.txt, scaling.json/.png, pong.json/.png, and log.txt (everything printed). Sampling runs in the
# learner's process (ALE's vector env on C++ threads), so Ray is not needed there; the one CUDA test that
# needs Ray's actors skips. KUBERL_GPU_DRY_RUN=1 runs every step here on the CPU with tiny budgets
# (the CUDA tests skip, the figures mean nothing): a check of the script, not a measurement.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-bench-gpu-out}
PONG_CAP=${PONG_CAP:-480}
PY=${PYTHON:-python3}
mkdir -p "$OUT"
exec > >(tee -a "$OUT/log.txt") 2>&1

# The wheels kuberl's trainer imports that the GPU machine's image lacks (versions from constraints.txt).
WHEELS="ale-py gymnasium Farama-Notifications pydantic pydantic_core annotated-types typing-inspection"

pinned() { grep -i "^$1==" constraints.txt | head -1; }

fetch_wheels() {
  rm -rf .whl && mkdir -p .whl
  for name in $WHEELS; do
    python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
      --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
      --platform manylinux2014_x86_64 -d .whl "$(pinned "$name")" || return 1
  done
  grep -qx '/.whl/' .git/info/exclude 2>/dev/null || echo '/.whl/' >> .git/info/exclude
  ls -la .whl
}

setup_python() {
  if [ -d .whl ] && ! "$PY" -c 'import ale_py, gymnasium, pydantic' 2>/dev/null; then
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
      || return 1
    export PYTHONPATH=/tmp/site
  fi
  export PYTHONPATH="$PWD/src:$PWD/testing${PYTHONPATH:+:$PYTHONPATH}"
  export MPLBACKEND=Agg
  date -u; nproc; free -g | head -2
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv 2>/dev/null || echo "no nvidia-smi"
  "$PY" -c 'import torch, ale_py, gymnasium; print("torch", torch.__version__, "cuda", torch.cuda.is_available(), "ale", ale_py.__version__)'
}

dry=()
[ "${KUBERL_GPU_DRY_RUN:-0}" = 1 ] && dry=(--allow-cpu --set rollouts.envsPerWorker=8 --set config.minibatchSize=256)

status=0
[ "${1:-}" = wheels ] && { fetch_wheels; exit $?; }
setup_python || exit 1
for step in "$@"; do
  echo "== $step: $(date -u +%H:%M:%S)"
  case $step in
    tests)
      timeout "${TESTS_TIMEOUT:-300}" "$PY" -m pytest -q -m cuda --noconftest -p no:cacheprovider -o addopts="" -rs \
        tests/integration/test_cuda.py 2>&1 | tee "$OUT/cuda-tests.txt" || status=1 ;;
    scaling)
      if [ ${#dry[@]} -gt 0 ]; then threads=1,2; window=3; else threads=${SCALING_THREADS:-1,2,4,8,14}; window=${SCALING_WINDOW:-12}; fi
      timeout 300 "$PY" bench/gpu.py scaling --threads "$threads" --window "$window" --out "$OUT" \
        ${dry[@]+"${dry[@]:0:1}"} || status=1 ;;
    overlap)
      # The example's batch (48 x 128 = 6,144) as 48 or 96 envs, in 1 or 2 groups, on every core.
      cores=$(nproc)
      if [ ${#dry[@]} -gt 0 ]; then points="${cores}x8x1x128,${cores}x8x2x128"; window=3
      else points="${cores}x48x1x128,${cores}x48x2x128,${cores}x96x1x64,${cores}x96x2x64"; window=${SCALING_WINDOW:-10}; fi
      timeout 300 "$PY" bench/gpu.py scaling --threads "$points" --window "$window" --out "$OUT/overlap" \
        ${dry[@]+"${dry[@]}"} || status=1 ;;
    pong)
      cap=$PONG_CAP; [ ${#dry[@]} -gt 0 ] && cap=15
      from=(); [ -f "$OUT/overlap/scaling.json" ] && from=(--from-scaling "$OUT/overlap/scaling.json")
      timeout $((${cap%.*} + 90)) "$PY" bench/gpu.py pong --cap "$cap" --out "$OUT" ${from[@]+"${from[@]}"} \
        ${dry[@]+"${dry[@]}"} || status=1 ;;
    *) echo "unknown step $step (wheels, tests, scaling, overlap, pong)"; status=2 ;;
  esac
done
echo "== done $(date -u +%H:%M:%S), status $status"
exit $status
