#!/usr/bin/env bash
# One round of checks on a GPU machine (written for the H200; logs and summaries under $OUT, default /tmp/h200).
#   tests     fp4bench doctor, then the GPU-marked tests: gpu1 gpu2 gpu3 gpu4 in turn (more than one 600 s device
#             call holds: on 2026-12-04 the first 88 of them took 540 s; give each its own call)
#   gpu1      the trust tests that start a worker per case (tests/trust/test_gpu.py, test_integrity.py)
#   gpu2      the hostile cases and the process and sandbox tests
#   gpu3      the harness's other GPU tests, export, the problem family, then the sample-buffer tests on CUDA
#   gpu4      the variants (wgmma_sm90, triton_grouped)
#   margin    benchmarks/bracket_margin.py: how far each honest window falls short of the parent's bracket
#             (wgmma_sm90 and triton_grouped, configs/device-budget.yml)
#   timing    fp4bench's own wall time: a leaderboard of wgmma_sm90 and a compare against triton_grouped, each run
#             twice (the second on warm compile caches), then the leaderboard once more with --sandbox off
#   lb        one leaderboard of wgmma_sm90 (the --json summary: means, pause per sample, kernel time)
#   fidelity  benchmarks/fidelity.py: the official loop against fp4bench, interleaved shape by shape
#   cost      benchmarks/sandbox_cost.py: three variants under --sandbox auto and off, alternated, 3 rounds
#   ablb      leaderboards of submissions/wgmma_sm90_base (an older copy of the variant, laid there by the caller)
#             and of wgmma_sm90, alternated, $AB_ROUNDS rounds (default 2), each with its geomean; both with
#             --sandbox off, since the copy builds into wgmma_sm90's cache, which its own sandbox does not open
# Wheels under .whl (carried: a dependency the machine lacks, e.g. msgspec) are installed first.
# PYTEST_LIMIT_S (default 540) bounds each gpuN step.
# Usage: bash benchmarks/h200_round.sh [tests|gpu1..gpu4|margin|timing|lb|fidelity|cost|ablb]...
#        (default: tests timing fidelity)
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/h200}
mkdir -p "$OUT"
steps=${*:-tests timing fidelity}
for step in $steps; do  # every step known before any runs
  case $step in
    tests|gpu1|gpu2|gpu3|gpu4|margin|timing|lb|fidelity|cost|ablb) ;;
    *) echo "h200_round.sh: unknown step '$step' (expected tests, gpu1-gpu4, margin, timing, lb, fidelity, cost or ablb)" >&2
       exit 2 ;;
  esac
done
if compgen -G ".whl/*.whl" > /dev/null; then  # into the system site: a sandboxed worker cannot read /tmp
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir .whl/*.whl || exit 1
fi
summary() {  # per-case mean, pause per sample and kernel time of a --json file
  python3 -c "
import json, sys; d = json.load(open(sys.argv[1]))
print(sys.argv[1].split('/')[-1], 'wall', d['wall_s'], 's;', d['window'], ';', d.get('sandbox', ''))
for c in d['cases']:
    s = c['stats'] or {}
    print(' ', c['case']['name'], c['status'], s.get('runs'), round(s.get('mean_ns', 0) / 1e3, 2), 'us; overhead',
          round(c['overhead_ms_per_sample'] or 0, 1), 'ms/sample; kernel', round((c['kernel_ns'] or 0) / 1e3, 2), 'us')
" "$1"
}
geomean() {  # the geomean of a --json file's means and kernel times, labelled $2
  python3 -c "import json, statistics, sys; d = json.load(open(sys.argv[1])); print(sys.argv[2], 'geomean',
round(statistics.geometric_mean([c['stats']['mean_ns'] / 1e3 for c in d['cases']]), 2), 'kernel',
round(statistics.geometric_mean([c['kernel_ns'] / 1e3 for c in d['cases']]), 2))" "$1" "$2"
}
leaderboard() {  # leaderboard of $1 on benchmarks, not stored, --json to $2; further arguments passed on
  local v=$1 out=$2; shift 2
  timeout 300 python3 -m harness run --submission "$v" --shapes benchmarks --mode leaderboard --no-store \
    --json "$out" "$@" > /dev/null 2>&1
}
for step in $steps; do
  case $step in
    tests|gpu1|gpu2|gpu3|gpu4)
      [ "$step" = tests ] || [ "$step" = gpu1 ] && python3 -m harness doctor 2>&1 | tee "$OUT/doctor.txt"
      for part in gpu1 gpu2 gpu3 gpu4; do
        [ "$step" = tests ] || [ "$step" = "$part" ] || continue
        case $part in
          gpu1) files="tests/trust/test_gpu.py tests/trust/test_integrity.py" ;;
          gpu2) files="tests/trust/test_cases.py tests/trust/test_exploits.py tests/harness/parent/test_procs.py
                       tests/harness/parent/test_sandbox.py" ;;
          gpu3) files="tests/harness/worker tests/harness/report/test_console.py
                       tests/harness/parent/test_memory.py tests/harness/parent/test_compare.py
                       tests/harness/test_cuda_bindings_gpu.py tests/harness/submit/test_export_standalone.py
                       tests/problems" ;;
          gpu4) files="tests/variants/test_wgmma_sm90_gpu.py tests/variants/test_triton_grouped.py" ;;
        esac
        # shellcheck disable=SC2086
        timeout "${PYTEST_LIMIT_S:-540}" python3 -m pytest -m gpu -q -p no:cacheprovider -rfE --durations=15 $files 2>&1 \
          | tee "$OUT/$part.log" | tail -40
        if [ "$part" = gpu3 ]; then  # unmarked tests whose sample buffers, canaries and reference take CUDA here
          timeout 240 python3 -m pytest -q -p no:cacheprovider -rfE tests/harness/parent/test_samples.py \
            tests/harness/parent/test_canaries.py tests/harness/parent/test_ahead.py tests/harness/parent/test_judge.py \
            2>&1 | tee "$OUT/gpu3_cuda.log" | tail -15
        fi
        if [ "$part" = gpu2 ]; then  # unmarked: honest runs under the idle rule and the deferred publication on CUDA,
          # and session 5's exploits (tests/cases/adversarial/y_*.py) against a CUDA worker
          timeout 300 python3 -m pytest -q -p no:cacheprovider -rfE tests/trust/test_cases.py \
            tests/trust/test_exploits.py -k "honest or reply_claiming or shrunk or guessed or next_sample or \
            works_while or deferred_into" 2>&1 | tee "$OUT/gpu2_cuda.log" | tail -15
        fi
      done ;;
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
      summary /tmp/lb2.json | tee "$OUT/timing.txt"; tee -a "$OUT/timing.txt" < /tmp/cmp2.md
      leaderboard wgmma_sm90 /tmp/lb_off.json --sandbox off
      summary /tmp/lb_off.json | tee -a "$OUT/timing.txt" ;;
    lb)
      /usr/bin/time -f "leaderboard wall %e s" python3 -m harness run --submission wgmma_sm90 --shapes benchmarks \
        --mode leaderboard --no-store --json /tmp/lb.json 2>&1 | tail -3
      summary /tmp/lb.json | tee -a "$OUT/timing.txt" ;;
    fidelity)
      timeout 400 python3 benchmarks/fidelity.py --submission wgmma_sm90 --shapes benchmarks --out-dir /tmp/fid \
        2>&1 | tail -9 | tee "$OUT/fidelity.md" ;;
    cost)
      timeout 560 python3 benchmarks/sandbox_cost.py --submission wgmma_sm90,triton_grouped,torch_reference \
        --shapes benchmarks --settings configs/device-budget.yml --rounds 3 --out "$OUT/sandbox_cost.md" ;;
    ablb)
      for i in $(seq "${AB_ROUNDS:-2}"); do
        for v in wgmma_sm90_base wgmma_sm90; do
          leaderboard $v "/tmp/ab_$v$i.json" --sandbox off
          summary "/tmp/ab_$v$i.json" | sed "s/^/$v[$i] /" | tee -a "$OUT/ablb.txt"
          geomean "/tmp/ab_$v$i.json" "$v[$i]" | tee -a "$OUT/ablb.txt"
        done
      done ;;
  esac
done
