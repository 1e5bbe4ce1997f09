#!/usr/bin/env bash
# One H200 device call for issue 19 (the warp-specialised loop), run from the repository root:
#     bash submissions/wgmma_sm90/ws_call.sh          # writes into $OUT (default /tmp/ws_call_out)
# 1. build: nvcc + ptxas report (registers, spills) -> inspect.txt; SASS per K step -> sass_count.txt
# 2. every GPU test of the variant with the WS loop forced on (-k ws; 120 s at most) -> gpu_tests_ws.txt
# 3. bench.py --time with the WS loop off and on, same host, same call -> ws0/, ws1/ (+ .txt logs)
#    (step 3's --ws 1 run only when step 2 passed: a wrong or hanging kernel would make its times meaningless)
# summary.txt: each step's exit status and the two geomean lines.
set -u
OUT=${OUT:-/tmp/ws_call_out}
mkdir -p "$OUT"
cd "$(dirname "$0")/../.." || exit 2
PY=${PYTHON:-python3}
export FP4BENCH_CACHE=${FP4BENCH_CACHE:-/tmp/fp4bench_cache}
summary="$OUT/summary.txt"
: > "$summary"
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,driver_version --format=csv > "$OUT/gpu.txt" 2>&1
git log --oneline -1 > "$OUT/commit.txt" 2>&1 || true

timeout 120 "$PY" submissions/wgmma_sm90/bench.py --inspect > "$OUT/inspect.txt" 2>&1
echo "build rc=$?" >> "$summary"
timeout 60 "$PY" submissions/wgmma_sm90/sass_count.py --ws-roles > "$OUT/sass_count.txt" 2>&1
echo "sass_count rc=$?" >> "$summary"

timeout 120 "$PY" -m pytest -q -m gpu -k ws -p no:cacheprovider tests/variants/test_wgmma_sm90_gpu.py \
    > "$OUT/gpu_tests_ws.txt" 2>&1
tests_rc=$?
echo "gpu tests (ws forced on) rc=$tests_rc: $(tail -1 "$OUT/gpu_tests_ws.txt")" >> "$summary"

timeout 180 "$PY" submissions/wgmma_sm90/bench.py --time --ws 0 --out "$OUT/ws0" > "$OUT/ws0.txt" 2>&1
echo "bench --ws 0 rc=$?: $(grep geomean "$OUT/ws0.txt")" >> "$summary"
if [ "$tests_rc" -eq 0 ]; then
    timeout 180 "$PY" submissions/wgmma_sm90/bench.py --time --ws 1 --out "$OUT/ws1" > "$OUT/ws1.txt" 2>&1
    echo "bench --ws 1 rc=$?: $(grep geomean "$OUT/ws1.txt")" >> "$summary"
else
    echo "bench --ws 1 skipped: the WS GPU tests did not pass" >> "$summary"
fi
cat "$summary"
