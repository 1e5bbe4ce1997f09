"""Which sandbox protection stops CUDA from starting in a confined worker (issue 22), one protection at a time.

Builds the plan ``--sandbox auto`` would give a CPU run of ``--submission`` on this machine (the GPU refusal set
aside), then starts a probe under that plan with each protection removed in turn, and under each protection alone.
The probe applies the plan's orders exactly as ``harness.confine`` does, then calls cuInit and cuDeviceGetCount
through libcuda (and, with --torch, for the first two tries, torch.cuda.device_count and a 256x256 matmul). Prints one line per try and
writes them as JSON to --out.

Run on a GPU machine: ``python3 benchmarks/sandbox_cuda.py --out /tmp/bisect.json [--torch]``.
"""
import argparse
import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harness import confine  # noqa: E402
from harness.parent import sandbox  # noqa: E402
from harness.parent.registry import resolve  # noqa: E402
from harness.parent.settings import load_settings  # noqa: E402

PROBE = """
import ctypes, json, os, sys
from harness import confine
orders = json.loads(os.environ.pop(confine.ENV))
try:
    confine.confine(orders)
except Exception as exc:
    print(json.dumps({"confine": f"refused: {exc}"})); sys.exit(0)
try:
    cuda = ctypes.CDLL("libcuda.so.1")
except OSError as exc:
    print(json.dumps({"confine": "ok", "libcuda": str(exc)})); sys.exit(0)
n = ctypes.c_int(-1)
out = {"confine": "ok", "cuInit": cuda.cuInit(0)}
out["cuDeviceGetCount"] = cuda.cuDeviceGetCount(ctypes.byref(n))
out["devices"] = n.value
if out["cuInit"]:
    msg = ctypes.c_char_p()
    cuda.cuGetErrorString(out["cuInit"], ctypes.byref(msg))
    out["error"] = (msg.value or b"").decode()
if os.environ.get("PROBE_TORCH"):
    try:
        import torch
        a = torch.ones(256, 256, device="cuda")
        out["torch"] = f"{torch.cuda.device_count()} devices, matmul sum {float((a @ a).sum()):.0f}"
    except Exception as exc:
        out["torch"] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
print(json.dumps(out))
"""


def _try(label: str, launch, orders: dict, wrapper: bool, torch: bool) -> dict:
    argv = list(launch.argv)
    i = argv.index("-m")
    prefix = argv[:i - 1] if wrapper else []
    cmd = prefix + [argv[i - 1], "-c", PROBE]
    env = {**launch.env, confine.ENV: json.dumps(orders)}
    if torch:
        env["PROBE_TORCH"] = "1"
    proc = subprocess.run(cmd, env=env, cwd=launch.cwd, capture_output=True, text=True, timeout=300)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    result = json.loads(lines[-1]) if lines else {"rc": proc.returncode, "stderr": proc.stderr[-400:]}
    result["try"] = label
    print(json.dumps(result), flush=True)
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--submission", default="torch_reference")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--torch", action="store_true", help="also start torch's CUDA and run a matmul")
    ap.add_argument("--quick", action="store_true", help="the full plan only (and no confinement, to compare)")
    args = ap.parse_args()
    settings = load_settings()
    plan = sandbox.plan_for(resolve(args.submission), sandbox.Sandbox("auto"), settings, cuda=False)
    plan = replace(plan, limits=sandbox._limits(settings, cuda=True))
    print("plan:", plan.summary, flush=True)
    launch = plan.launch([sys.executable, "-m", "harness.worker"], dict(os.environ), Path.cwd())
    full = json.loads(launch.env[confine.ENV])
    wrapped = launch.argv[0] != sys.executable
    results = [_try("nothing (no wrapper, no orders)", launch, {}, False, args.torch),
               _try("full plan", launch, full, wrapped, args.torch)]
    if args.quick:
        args.out.write_text(json.dumps({"plan": plan.summary, "argv": launch.argv, "tries": results}, indent=1))
        return
    args.torch = False
    if wrapped:
        results.append(_try("without the namespace wrapper", launch, full, False, args.torch))
    for key in ("limits", "landlock", "drop_caps"):
        less = {**full, key: {"limits": {}, "landlock": "none", "drop_caps": False}[key]}
        results.append(_try(f"without {key}", launch, less, wrapped, args.torch))
        alone = {"limits": {}, "landlock": "none", "drop_caps": False, key: full.get(key) or key == "drop_caps"}
        if key == "landlock":
            alone.update({k: full[k] for k in ("read", "write", "devices", "hide") if k in full})
        results.append(_try(f"{key} alone", launch, alone, False, args.torch))
    for name in full.get("limits", {}):
        results.append(_try(f"only {name}", launch, {"limits": {name: full["limits"][name]}}, False, args.torch))
        results.append(_try(f"{name} + drop_caps", launch, {"limits": {name: full["limits"][name]},
                                                            "drop_caps": True}, False, args.torch))
    if wrapped:
        results.append(_try("wrapper alone", launch, {}, True, args.torch))
    # Which part of Landlock: its scopes, its read rules or its write rules; then each top folder added back to
    # the writes (the plan's own /proc entry taken out first).
    land = {k: full[k] for k in ("landlock", "read", "write", "devices", "hide") if k in full}
    writes = [w for w in land.get("write", []) if w != sandbox._OWN_PROC]
    everything = [d for d in ("/dev", "/proc", "/proc/self", "/proc/thread-self", "/proc/driver", "/sys", "/run",
                              "/tmp") if os.path.exists(d)]
    results.append(_try("landlock scopes alone", launch, {"landlock": "scope"}, False, False))
    results.append(_try("landlock, all readable and writable", launch,
                        {**land, "read": ["/"], "write": ["/"], "hide": []}, False, False))
    results.append(_try("landlock, plan's reads, all writable", launch, {**land, "write": ["/"]}, False, False))
    results.append(_try("landlock, plan's writes less /proc/self", launch, {**land, "write": writes}, False, False))
    for extra in everything:
        results.append(_try(f"landlock, plan's writes less /proc/self, + {extra}", launch,
                            {**land, "write": [*writes, extra]}, False, False))
    launch.close()
    args.out.write_text(json.dumps({"plan": plan.summary, "argv": launch.argv, "tries": results}, indent=1))


if __name__ == "__main__":
    main()
