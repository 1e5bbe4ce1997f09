#!/usr/bin/env bash
# One device call's worth of checks on the H200 (the device tool; logs and JSON under $OUT):
# GPU tests, then fp4bench's own wall times (leaderboard of one variant, compare of two), then fidelity.
# Usage: bash benchmarks/h200_round.sh [tests|timing|fidelity]...   (default: all three)
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/h200}
mkdir -p "$OUT"
steps=${*:-tests timing fidelity}
for step in $steps; do
  case $step in
    tests)
      python3 -c "from harness.worker import native; print(native.available())" 2>&1 | tee "$OUT/native.txt"
      timeout 420 python3 -m pytest -m gpu -q tests/test_gpu.py tests/test_reference_gpu.py tests/test_native_guard.py \
        tests/test_threads.py tests/test_integrity.py 2>&1 | tee "$OUT/gpu_tests.log" | tail -15 ;;
    timing)
      /usr/bin/time -f "leaderboard wall %e s" python3 -m harness run --submission wgmma_sm90 --shapes benchmarks \
        --mode leaderboard --db "$OUT/r.sqlite" --json "$OUT/leaderboard.json" 2>&1 | tail -12
      /usr/bin/time -f "compare wall %e s" python3 -m harness compare wgmma_sm90 triton_grouped --shapes benchmarks \
        --db "$OUT/r.sqlite" --format md 2>&1 | tail -12 ;;
    fidelity)
      timeout 400 python3 benchmarks/fidelity.py --submission wgmma_sm90 --shapes benchmarks --out-dir /tmp/fid \
        2>&1 | tail -10; cp /tmp/fid/fidelity.md "$OUT/" ;;
  esac
done
