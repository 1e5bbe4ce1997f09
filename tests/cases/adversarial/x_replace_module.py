"""Kind: overwrite files that a later run (or the judge) imports. Source: pygpubench's replace_torch (write
torch.py into the working directory).

At import this submission tries to open for writing, without writing a byte (so nothing is changed even where it
succeeds), the files that would let a submission cheat later runs: the harness's own timing code in the checkout,
the honest control beside it, the timing guard's build in the native cache, and a new file beside the checkout's
code. The number of attempts and each one that succeeded are logged to the file named by X_WRITABLE_LOG when set
(a folder the test makes writable); then it computes honestly. A correct harness must refuse every one of these
writes (the sandbox): the log lists none and the case passes with an honest time."""
import os

from honest_torch import custom_kernel  # noqa: F401

_root = os.getcwd()
_targets = [os.path.join(_root, "harness", "worker", "timing.py"),
            os.path.join(os.path.dirname(os.path.abspath(__file__)), "honest_torch.py")]
_cache = os.path.join(os.environ.get("FP4BENCH_CACHE", ""), "native")
if os.path.isdir(_cache):
    _targets += [os.path.join(_cache, f) for f in os.listdir(_cache) if f.startswith("guard-")]

_writable = []
for path in _targets:
    try:
        with open(path, "ab"):
            _writable.append(path)
    except OSError:
        pass
try:
    fd = os.open(os.path.join(_root, "harness", "x_replace_module_probe.py"), os.O_WRONLY | os.O_CREAT | os.O_EXCL)
    os.close(fd)
    os.unlink(os.path.join(_root, "harness", "x_replace_module_probe.py"))
    _writable.append("a new file in the checkout")
except OSError:
    pass
if os.environ.get("X_WRITABLE_LOG"):
    with open(os.environ["X_WRITABLE_LOG"], "w") as f:
        f.write("\n".join([f"tried {len(_targets) + 1}", *_writable]))
