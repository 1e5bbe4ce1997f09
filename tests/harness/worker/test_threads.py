"""harness.worker.threads: torch's intra-op pool is started before the import, so its threads are among the tasks
the parent trusts (harness.parent.watch)."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def test_prestart_torch_pool_starts_the_intra_op_threads_once():
    """In a fresh process: the pool's threads appear with prestart_torch_pool, and a later parallel op adds none."""
    code = (f"import os, sys, json; sys.path.insert(0, {str(ROOT)!r}); import torch\n"
            "from harness.worker.threads import prestart_torch_pool\n"
            "tids = lambda: set(os.listdir('/proc/self/task'))\n"
            "a = tids(); n = prestart_torch_pool(); b = tids(); (torch.ones(1 << 22) * 2).sum(); c = tids()\n"
            "print(json.dumps([n, len(a), len(b), sorted(c - b)]))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    n, before, after, later = json.loads(proc.stdout.splitlines()[-1])
    assert after - before >= n - 1
    assert later == []
