#!/usr/bin/env bash
# The second of the two device calls that bring CuTe DSL to the H200 (tools/dsl_to_device.py), then everything
# issue 46 asks of cute_wgmma_sm90 there, most important first, each step bounded, logs under $OUT (8 files):
#   install.log   the DSL unpacked into python3's site-packages (and .whl/*.whl, e.g. msgspec, when carried)
#   doctor.txt    what confines a worker here
#   gpu_tests.log the variant's GPU tests: every tests/benchmarks shape in both data modes, cold vs warm process
#   lb1.json, lb2.json  leaderboards (configs/device-budget.yml) on a fresh cache, then warm; summary.txt
#   strict.txt    the official test shapes under --sandbox strict
# Usage (call 2, carry [".dsl/2"] and, if the harness needs it, [".whl"]): bash benchmarks/cute_dsl_call.sh
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/cute_dsl_call}
mkdir -p "$OUT"
python3 tools/dsl_to_device.py install 2>&1 | tee "$OUT/install.log" || exit 1
if compgen -G ".whl/*.whl" > /dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir .whl/*.whl 2>&1 | tee -a "$OUT/install.log"
fi
python3 -m harness doctor > "$OUT/doctor.txt" 2>&1
timeout 170 python3 -m pytest -q -rA -m gpu tests/variants/test_cute_wgmma_sm90.py 2>&1 \
  | grep -v "^PASSED" | tee "$OUT/gpu_tests.log" | tail -25
export FP4BENCH_CACHE=/tmp/fp4bench-cache   # empty on a fresh machine: lb1 compiles, lb2 must load
for i in 1 2; do
  /usr/bin/time -f "leaderboard $i wall %e s" timeout 150 python3 -m harness run --submission cute_wgmma_sm90 \
    --shapes benchmarks --mode leaderboard --settings configs/device-budget.yml --no-store --json "$OUT/lb$i.json" \
    --worker-log "/tmp/worker$i.log" 2>&1 | tail -12 | tee -a "$OUT/summary.txt"
done
python3 - "$OUT" <<'PY' | tee -a "$OUT/summary.txt"
import json, math, sys
for i in (1, 2):
    try:
        d = json.load(open(f"{sys.argv[1]}/lb{i}.json"))
    except (OSError, ValueError) as exc:
        print(f"lb{i}: no record ({exc})"); continue
    means = [c["stats"]["mean_ns"] / 1e3 for c in d["cases"] if c.get("stats")]
    print(f"lb{i}: wall {d['wall_s']:.1f} s; sandbox {d.get('sandbox')}")
    for c in d["cases"]:
        s = c.get("stats") or {}
        print(f"  {c['case']['name']} {c['status']} {s.get('mean_ns', 0) / 1e3:.2f} us; {(c.get('message') or '')[:300]}")
    if means and len(means) == len(d["cases"]):
        print(f"  geomean {math.exp(sum(map(math.log, means)) / len(means)):.2f} us")
PY
ls -la "$FP4BENCH_CACHE"/sandbox/*/cute_wgmma_sm90 2>&1 | tee -a "$OUT/summary.txt"
grep -h -i -E "compil|cache|note" /tmp/worker1.log /tmp/worker2.log 2>/dev/null | head -20 >> "$OUT/summary.txt"
timeout 90 python3 -m harness run --submission cute_wgmma_sm90 --shapes tests --sandbox strict --no-store \
  --timeout 60 > "$OUT/strict.txt" 2>&1; echo "strict exit $?" >> "$OUT/strict.txt"
