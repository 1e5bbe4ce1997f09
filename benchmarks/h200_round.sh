#!/usr/bin/env bash
# Device calls' worth of checks on the H200 (the device tool; logs and JSON under $OUT, at most 8 files back):
#   tests     doctor, then the GPU-marked tests of the harness, reference, guard, threads, integrity, sandbox
#   timing    fp4bench's own wall times: leaderboard of one variant and compare of two, each run twice (the
#             second on warm compile caches), plus wgmma_sm90's leaderboard with --sandbox off
#   fidelity  benchmarks/fidelity.py on benchmarks (the official loop against fp4bench, interleaved)
#   spin      the same on the two small shapes with FP4BENCH_SPIN_WAIT_MS=500 (the worker polls instead of sleeping)
#   sandbox   benchmarks/sandbox_cuda.py: cuInit under the sandbox plan with each protection left out and alone
#   cost      benchmarks/sandbox_cost.py: the three variants under --sandbox auto and off, alternated, 3 rounds
#   stages    benchmarks/prepare_stages.py: the parent's prepare of a sample, stage by stage, on shapes 1 and 4
#   timeline  benchmarks/sample_timeline.py: a timed sample's pause phase by phase (prepare ahead, request, judge)
#   reftile   benchmarks/reference_tiles.py: the reference GEMM's tile, today's against two candidates
#   s8        wgmma_sm90's bench.py --check (the rule), then --time with the int8 path off and on, 2 rounds
#   s8tests   the GPU tests of wgmma_sm90's int8 path (-k s8)
#   s8flags   bench.py --time (the rule) once per nvcc flag set in $S8_FLAGS ("|"-separated; "" is the default build)
#   lb        one leaderboard of wgmma_sm90 on benchmarks (--json summary: means, overhead, kernel time)
#   profile   benchmarks/overhead_profile.py: cProfile of parent and worker over 30 samples of g8_n4096_k7168
#   torchcost sandbox_cost.py for torch_reference on g2_n4096_k1536 alone (host-bound), 2 rounds
#   phases    benchmarks/run_phases.py: a whole leaderboard of wgmma_sm90, phase by phase, twice (cold, then warm)
#   cupti     benchmarks/cupti_cost.py: a kernel-time pass's profiler costs, three ways of driving torch.profiler
#   wgtests   the GPU tests of wgmma_sm90 but the warp-specialised loop's (-k "not ws")
#   early     wgmma_sm90's bench.py --time with -DWG_NO_EARLY and without (the prefetch before griddepcontrol.wait), 2 rounds
#   ablb      leaderboards of submissions/wgmma_sm90_base (an older copy of the variant, laid there by the caller) and of
#             wgmma_sm90, alternated, $AB_ROUNDS rounds (default 2), each with its geomean; both --sandbox off, since
#             the copy builds into $FP4BENCH_CACHE/wgmma_sm90, which its sandbox (named by the folder) does not open
# Wheels under .whl (carried: a dependency the device image lacks, e.g. msgspec) are installed first.
# Usage: bash benchmarks/h200_round.sh [tests|margin|timing|fidelity|spin|sandbox|cost|stages|timeline|reftile|lb|profile|torchcost|phases|early|cupti|wgtests|s8|s8tests|s8flags|ablb]...   (default: tests timing fidelity)
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/h200}
mkdir -p "$OUT"
steps=${*:-tests timing fidelity}
if compgen -G ".whl/*.whl" > /dev/null; then  # into the system site: a sandboxed worker cannot read /tmp
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir .whl/*.whl || exit 1
fi
summary() {  # per-case mean, overhead and kernel time of a --json file
  python3 -c "
import json, sys; d = json.load(open(sys.argv[1]))
print(sys.argv[1].split('/')[-1], 'wall', d['wall_s'], 's;', d['window'], ';', d.get('sandbox', ''))
for c in d['cases']:
    s = c['stats'] or {}
    print(' ', c['case']['name'], c['status'], s.get('runs'), round(s.get('mean_ns', 0) / 1e3, 2), 'us; overhead',
          round(c['overhead_ms_per_sample'] or 0, 1), 'ms/sample; kernel', round((c['kernel_ns'] or 0) / 1e3, 2), 'us')
" "$1"
}
ab_rounds() {  # wgmma_sm90's bench.py --check, then --time with --$1 0 and --$1 1, two rounds each
  timeout 200 python3 submissions/wgmma_sm90/bench.py --check 2>&1 | tail -4 | tee "$OUT/$1_check.txt"
  for i in 1 2; do
    for f in 0 1; do
      timeout 120 python3 submissions/wgmma_sm90/bench.py --time --"$1" $f 2>&1 \
        | grep -E '^\{"case|geomean' | sed "s/^/$1[$f] /" | tee -a "$OUT/$1.txt"
    done
  done
}
for step in $steps; do
  case $step in
    tests)
      python3 -m harness doctor 2>&1 | tee "$OUT/doctor.txt"
      timeout 540 python3 -m pytest -m gpu -q -p no:cacheprovider --durations=15 tests/test_gpu.py tests/test_reference_gpu.py tests/test_native_guard.py \
        tests/test_threads.py tests/test_integrity.py tests/test_sandbox.py tests/test_console.py tests/test_cases.py \
        tests/test_memory.py tests/test_exploits.py tests/test_procs.py tests/test_timing.py \
        tests/variants/test_wgmma_sm90.py tests/variants/test_triton_grouped.py 2>&1 \
        | tee "$OUT/gpu_tests.log" | tail -40 ;;
    margin)  # the parent's bracket against each window, per sample (benchmarks/bracket_margin.py), two variants
      for v in wgmma_sm90 triton_grouped; do
        timeout 200 python3 benchmarks/bracket_margin.py --submission $v --shapes benchmarks --mode leaderboard \
          --settings configs/device-budget.yml --out "$OUT/margin_$v.json" 2>&1 | tail -8 | tee -a "$OUT/margin.txt"
      done ;;
    timing)
      for i in 1 2; do
        /usr/bin/time -f "leaderboard $i wall %e s" python3 -m harness run --submission wgmma_sm90 --shapes benchmarks \
          --mode leaderboard --db /tmp/r.sqlite --json "/tmp/lb$i.json" 2>&1 | tail -1
        /usr/bin/time -f "compare $i wall %e s" python3 -m harness compare wgmma_sm90 triton_grouped \
          --shapes benchmarks --db /tmp/r.sqlite --format md --out "/tmp/cmp$i.md" 2>&1 | tail -1
      done
      summary /tmp/lb2.json | tee "$OUT/timing.txt"; cat /tmp/cmp2.md | tee -a "$OUT/timing.txt"
      python3 -m harness run --submission wgmma_sm90 --shapes benchmarks --mode leaderboard --sandbox off \
        --no-store --json /tmp/lb_off.json > /dev/null 2>&1
      summary /tmp/lb_off.json | tee -a "$OUT/timing.txt" ;;
    fidelity)
      timeout 400 python3 benchmarks/fidelity.py --submission wgmma_sm90 --shapes benchmarks --out-dir /tmp/fid \
        2>&1 | tail -9 | tee "$OUT/fidelity.md" ;;
    spin)
      { echo "cases:"; grep -E "name: g2_" configs/shapes/benchmarks.yml; } > /tmp/small.yml
      FP4BENCH_SPIN_WAIT_MS=500 timeout 300 python3 benchmarks/fidelity.py --submission wgmma_sm90 \
        --shapes /tmp/small.yml --out-dir /tmp/spin 2>&1 | tail -6 | tee "$OUT/spin.md" ;;
    sandbox)
      timeout 150 python3 benchmarks/sandbox_cuda.py --torch --out "$OUT/sandbox_cuda.json" 2>&1 | tee "$OUT/sandbox_cuda.txt" ;;
    cost)
      timeout 560 python3 benchmarks/sandbox_cost.py --submission wgmma_sm90,triton_grouped,torch_reference \
        --shapes benchmarks --settings configs/device-budget.yml --rounds 3 --out "$OUT/sandbox_cost.md" ;;
    reftile)  # the Triton reference GEMM's tile: today's against 8 warps and 128 rows of A, interleaved
      timeout 120 python3 benchmarks/reference_tiles.py --tiles 64x128x4x3,64x128x8x3,128x128x8x4 --reps 9 \
        --out "$OUT/tiles.json" 2>&1 | tail -12 | tee "$OUT/tiles.txt" ;;
    lb)
      /usr/bin/time -f "leaderboard wall %e s" python3 -m harness run --submission wgmma_sm90 --shapes benchmarks \
        --mode leaderboard --no-store --json /tmp/lb.json 2>&1 | tail -3
      summary /tmp/lb.json | tee -a "$OUT/timing.txt" ;;
    profile)
      timeout 200 python3 benchmarks/overhead_profile.py --submission wgmma_sm90 --case 0 --runs 30 --top 40 \
        > "$OUT/profile.txt" 2>&1; head -3 "$OUT/profile.txt" ;;
    phases)
      for i in 1 2; do
        timeout 200 python3 benchmarks/run_phases.py --out "$OUT/phases$i.json" -- --submission wgmma_sm90 \
          --shapes benchmarks --mode leaderboard --no-store --json "/tmp/ph$i.json" 2>&1 | tail -17 \
          | tee -a "$OUT/phases.txt"
        summary "/tmp/ph$i.json" | tee -a "$OUT/phases.txt"
      done ;;
    s8)
      ab_rounds s8 ;;
    s8flags)
      IFS='|' read -ra sets <<< "${S8_FLAGS:-}"
      for f in "${sets[@]}"; do
        WGMMA_SM90_NVCC_EXTRA="$f" timeout 150 python3 submissions/wgmma_sm90/bench.py --time 2>&1 \
          | grep -E '^\{"case|geomean' | sed "s/^/flags[$f] /" | tee -a "$OUT/s8flags.txt"
      done ;;
    s8tests)
      timeout 400 python3 -m pytest -q -m gpu -k s8 -p no:cacheprovider tests/variants/test_wgmma_sm90.py 2>&1 \
        | tail -8 | tee "$OUT/s8tests.txt" ;;
    early)
      for i in 1 2; do
        for f in "-DWG_NO_EARLY" ""; do
          WGMMA_SM90_NVCC_EXTRA="$f" timeout 150 python3 submissions/wgmma_sm90/bench.py --time 2>&1 \
            | grep -E '^\{"case|geomean' | sed "s/^/early[$f] /" | tee -a "$OUT/early.txt"
        done
      done ;;
    ablb)
      for i in $(seq "${AB_ROUNDS:-2}"); do
        for v in wgmma_sm90_base wgmma_sm90; do
          timeout 200 python3 -m harness run --submission $v --shapes benchmarks --mode leaderboard --no-store \
            --sandbox off --json "/tmp/ab_$v$i.json" > /dev/null 2>&1
          summary "/tmp/ab_$v$i.json" | sed "s/^/$v[$i] /" | tee -a "$OUT/ablb.txt"
          python3 -c "import json, statistics, sys; d = json.load(open(sys.argv[1])); print(sys.argv[2], 'geomean',
round(statistics.geometric_mean([c['stats']['mean_ns'] / 1e3 for c in d['cases']]), 2), 'kernel',
round(statistics.geometric_mean([c['kernel_ns'] / 1e3 for c in d['cases']]), 2))" "/tmp/ab_$v$i.json" "$v[$i]" \
            | tee -a "$OUT/ablb.txt"
        done
      done ;;
    cupti)
      timeout 200 python3 benchmarks/cupti_cost.py --reps 5 --out "$OUT/cupti_cost.json" 2>&1 | grep -v USDT \
        | tee "$OUT/cupti.txt" ;;
    wgtests)
      timeout 400 python3 -m pytest -q -m gpu -k "not ws" -p no:cacheprovider tests/variants/test_wgmma_sm90.py 2>&1 \
        | tail -5 | tee "$OUT/wgtests.txt" ;;
    torchcost)
      timeout 400 python3 benchmarks/sandbox_cost.py --submission torch_reference --rounds 2 \
        --shapes "m: [128, 384]; n: [4096, 4096]; k: [1536, 1536]; g: 2; seed: 1111" \
        --settings configs/device-budget.yml --out "$OUT/torch_cost.md" ;;
    stages)
      for c in 0 3; do timeout 90 python3 benchmarks/prepare_stages.py --case $c 2>&1 | tee -a "$OUT/stages.txt"; done ;;
    timeline)
      for c in 0 3; do timeout 90 python3 benchmarks/sample_timeline.py --submission wgmma_sm90 --case $c --runs 20 \
        2>&1 | tail -8 | tee -a "$OUT/timeline.txt"; done ;;
  esac
done
