"""harness.parent.judge: facts from the worker in, verdicts out; a CUDA failure is a fact, never read from text."""
from __future__ import annotations

import dataclasses

import pytest

from harness import protocol as P
from harness.parent import judge
from harness.parent.judge import CaseFailed
from harness.protocol import ExitCode
from harness.results.record import CaseResult, Environment, RunRecord, Status, SubmissionInfo, exit_code
from problems.nvfp4_group_gemm.spec import Case

CASE = Case((64,), (128,), (256,), 1, 1)


def test_failed_calls_are_worded_from_facts():
    cuda = judge.call_failed(P.Failed("cuda", "RuntimeError", "illegal memory access", "tb"))
    assert (cuda.status, cuda.message, cuda.cuda) == (Status.ERROR, "CUDA error: RuntimeError: illegal memory "
                                                                     "access\ntb", True)
    raised = judge.call_failed(P.Failed("exception", "KernelError", "", "", str_raised="UnicodeDecodeError"))
    assert (raised.message, raised.cuda) == ("raised: KernelError: <str() of the exception raised "
                                             "UnicodeDecodeError>", False)
    entry = judge.load_failed(P.Failed("entry", "MissingEntryPoint", "", callables=("kernel",)), "/x/k.py")
    assert entry.message == ("no entry point: MissingEntryPoint: /x/k.py defines no callable custom_kernel(data) "
                             "(callables found: kernel)")


def test_container_labels_name_subclasses():
    assert judge.container_label(P.Container("builtins.list", True)) == "builtins.list"
    assert judge.container_label(P.Container("builtins.list", False, "list")) == \
        "a subclass of list named builtins.list"
    assert judge.container_label(P.Container("x.Y", False)) == "x.Y"


def test_exit_code_reads_the_cuda_fact_not_the_message():
    """A submission that raises an exception saying "CUDA error" is not a CUDA failure; a worker that exited with
    110 is, whatever its message."""
    record = RunRecord("r", "t", "test", "official", "s", None, SubmissionInfo("v", "p", "h"),
                       Environment(*"abcdefghi"), (), True)
    lying = CaseResult(CASE, Status.ERROR, "raised: ValueError: CUDA error: fake")
    died = CaseResult(CASE, Status.CRASH, "the worker process exited with code 110", cuda_failure=True)
    assert exit_code(dataclasses.replace(record, cases=(lying,))) is ExitCode.CHECK_FAILED
    assert exit_code(dataclasses.replace(record, cases=(lying, died))) is ExitCode.CUDA_FAILURE


def test_run_notes_are_worded_here():
    reply = P.RunReply(0.0, 1, (), (), (), guard=("time.perf_counter",), refused=("sys.addaudithook",))
    assert judge.notes(reply) == ["the submission replaced time.perf_counter; fp4bench measures with its own "
                                  "captured copy", "sys.addaudithook refused (it never ran)"]
    assert judge.outside_window(reply) is None
    hooked = dataclasses.replace(reply, hooks=("gc callback (f)",))
    assert judge.outside_window(hooked).startswith("the submission left code that runs outside its calls: gc ")


def test_a_worker_that_exits_110_is_a_cuda_failure():
    from tests.conftest import SHARED_CASES

    from harness.parent.session import Session
    from harness.parent.process import WorkerDied
    from harness.parent.registry import read_variant
    from harness.parent.settings import Settings

    class Dead:
        stray_bytes = 0

        def __init__(self, code):
            self.code = code

        def receive(self, timeout_s):
            raise WorkerDied("the worker process exited after a CUDA error (exit code 110)", self.code)

        def close(self, wait_s=None):
            pass

    session = Session(read_variant(SHARED_CASES / "honest_torch.py"), Settings())
    for code, cuda in ((ExitCode.CUDA_FAILURE, True), (1, False), (-9, False)):
        session.proc = Dead(code)
        with pytest.raises(judge.CaseFailed) as failed:
            session._receive(1.0, (P.RunReply,))
        assert (failed.value.status, failed.value.cuda) == (Status.CRASH, cuda)


def test_thread_time_below_a_tenth_of_a_ms_reads_in_us():
    """A thread that woke briefly is named with its microseconds, never as "used 0.0 ms" (harness.parent.watch)."""
    from harness.parent import watch
    found = [watch.Finding("python", 5, 6, 6_600), watch.Finding("spin", 9, 9, 2_300_000, child=True)]
    assert watch.verdict(found) == (
        "work outside the timed window: thread 'python' (pid 5, tid 6) used 7 us; child process 'spin' (pid 9, tid 9) "
        "used 2.3 ms of CPU between samples (read by the parent from /proc); a submission's threads and processes "
        "must be idle outside its custom_kernel calls")


def test_outputs_equal_to_a_non_finite_reference_are_a_harness_error():
    """A reply whose outputs match the expected ones bit for bit is still not a pass when the expected outputs hold
    an inf or a NaN: the reference is broken, which judge.outputs raises as ReferenceError (ERROR, never FAIL)."""
    import torch

    from harness.parent.samples import ArenaSample, SharedSet
    from problems.nvfp4_group_gemm.sample_buffers import Layout
    from problems.nvfp4_group_gemm.check import ReferenceError
    from harness.problem import OutputMeta

    cpu = torch.device("cpu")
    shared = SharedSet(cpu)
    shared.grow(Layout.of(CASE, 2))
    sample = ArenaSample(CASE, 2, "official", cpu, shared)
    sample.prepare([3, 4], official_order=False)
    meta = OutputMeta("torch.Tensor", True, "torch.float16", (64, 128, 1), "cpu")
    reply = P.RunReply(1.0, 2, (P.Container("builtins.list", True),) * 2, ((meta,),) * 2, ((True,),) * 2)
    for bad in (float("inf"), float("nan")):
        sample.expected()[100] = bad
        sample.got().copy_(sample.expected())
        with pytest.raises(ReferenceError, match=r"^the reference output holds NaN or inf$"):
            judge.outputs(sample, reply)
    sample.prepare([5, 6], official_order=False)
    sample.got().copy_(sample.expected())
    assert judge.outputs(sample, reply) is None
    shared.close()


# --- messages of any size are cut, head and tail kept ----------------------------------------------------------
def test_a_one_line_message_keeps_its_head_and_tail_in_exactly_the_cap():
    from harness.results.record import MESSAGE_CHARS, cut_message

    assert MESSAGE_CHARS == 65536
    text = "A" * 7_500_000 + "B" * 7_500_000
    cut = cut_message(text)
    assert len(cut) == MESSAGE_CHARS
    assert cut == "A" * 32750 + "\n[... 14934499 characters cut ...]\n" + "B" * 32751
    assert cut_message(cut) == cut  # at the cap already: kept as it is
    assert cut_message("short\nmessage") == "short\nmessage"


def _traceback_of(size: int) -> tuple[str, str, str]:
    """A traceback of ``size``-ish characters of 100-character lines, its first and its last line."""
    first, last = "Traceback (most recent call last):", '  File "k.py", line 3, in custom_kernel'
    return "\n".join([first] + ["y" * 99] * (size // 100) + [last]), first, last


def test_verdicts_on_a_15_mb_exception_are_cut_keeping_first_and_last_lines():
    from harness.results.record import MESSAGE_CHARS

    tb, first, last = _traceback_of(15_000_000)
    failed = judge.call_failed(P.Failed("exception", "ValueError", "z" * 15_000_000, tb))
    assert len(failed.message) <= MESSAGE_CHARS and str(failed) == failed.message
    assert failed.message.startswith("raised: ValueError: zzz") and failed.message.endswith("\n" + last)
    assert f"zzz\n{first}\nyyy" in failed.message  # the traceback's head too, not only the exception text's
    loaded = judge.load_failed(P.Failed("import", "ImportError", "boom", tb), "/x/k.py")
    head, rest = loaded.message.split("\n[... ")
    marker, tail = rest.split("\n", 1)
    assert head.startswith(f"import failed: ImportError: boom\n{first}\n") and tail.endswith("\n" + last)
    assert marker.endswith(" characters cut ...]")  # N: every character left out, the newlines around included
    assert int(marker.split()[0]) == len(f"import failed: ImportError: boom\n{tb}") - len(head) - len(tail)
    assert MESSAGE_CHARS - 200 < len(loaded.message) <= MESSAGE_CHARS  # cut at line ends: whole lines kept
    died = judge.CaseFailed(Status.CRASH, "the worker process was killed by SIGKILL; last output: " + "o" * 20_000_000)
    assert len(died.message) == MESSAGE_CHARS and died.verdict.message == died.message


def test_a_15_mb_exception_from_a_real_worker_is_stored_cut(tmp_path):
    """Through the whole path: the worker's Failed reply (under the channel's frame limit), the verdict, the
    store. The message keeps its first line and the traceback's end."""
    import sqlite3

    from click.testing import CliRunner

    from harness.cli.commands import main
    from harness.results.record import MESSAGE_CHARS

    sub = tmp_path / "big" / "k.py"
    sub.parent.mkdir()
    sub.write_text("def custom_kernel(data):\n    raise ValueError('first line\\n' + 'x' * 15_000_000 + '\\nlast')\n")
    db = tmp_path / "r.sqlite"
    result = CliRunner().invoke(main, ["run", "--submission", str(sub), "--db", str(db), "--timeout", "120",
                                       "--shapes", "m: [64]; n: [128]; k: [256]; g: 1; seed: 1"])
    assert result.exit_code == ExitCode.CHECK_FAILED, result.output
    with sqlite3.connect(db) as conn:
        status, message, body = conn.execute("SELECT status, message, length(record_json) FROM cases").fetchone()
    lines = message.splitlines()
    assert (status, lines[0], lines[-1]) == ("error", "raised: ValueError: first line", "last")
    # the worker cuts the text to 48 KiB (a courtesy: a submission could skip it, and the parent cuts again)
    cuts = [line for line in lines if line.startswith("[... ")]
    assert len(cuts) == 1 and int(cuts[0].split()[1]) > 14_900_000 and len(message) <= MESSAGE_CHARS
    assert body < 2 * MESSAGE_CHARS


def test_a_timeout_says_which_phase_timed_out():
    from harness.parent.judge import timeout_named

    with pytest.raises(CaseFailed) as info:
        with timeout_named("importing the submission took over import_s = 300 s"):
            raise CaseFailed(Status.TIMEOUT, "timeout after 300 s")
    assert (info.value.status, info.value.message) == (
        Status.TIMEOUT, "timeout: importing the submission took over import_s = 300 s")
    with pytest.raises(CaseFailed) as info:  # any other verdict passes through as it is
        with timeout_named("importing"):
            raise CaseFailed(Status.ERROR, "import failed: ValueError: x")
    assert info.value.message == "import failed: ValueError: x"


# What str() of a CuTe DSL DSLRuntimeError is (nvidia-cutlass-dsl 4.8.1, base_dsl/common.py renders it through
# diagnostics.render_user_diagnostic): a leading newline, then colour codes; a console that shows the first line
# showed "raised: DSLRuntimeError: " and nothing else.
DSL_TEXT = ("\n\x1b[91m\x1b[1merror[INTERNAL]:\x1b[0m The compiler hit an internal DSL problem while compiling your "
            "code.\n  \x1b[94mnote:\x1b[0m This is a bug in the DSL, not a mistake in your kernel.\n  \x1b[91merror:"
            "\x1b[0m Failed to verify IR\n  \x1b[91merror:\x1b[0m Caused exception: error: 'nvvm.tcgen05.alloc' op "
            "requires sm_100a\n")


def test_exception_text_is_plain_and_starts_with_its_first_words():
    text = judge.exception_text(P.Failed("exception", "DSLRuntimeError", DSL_TEXT, ""))
    assert text == ("DSLRuntimeError: error[INTERNAL]: The compiler hit an internal DSL problem while compiling your "
                    "code.\n  note: This is a bug in the DSL, not a mistake in your kernel.\n  error: Failed to verify "
                    "IR\n  error: Caused exception: error: 'nvvm.tcgen05.alloc' op requires sm_100a")
    assert judge.exception_text(P.Failed("exception", "KeyError", " \n", "")) == "KeyError (with no message)"
    assert judge.plain_text("\x1b]8;;http://x\x1b\\link\x1b]8;;\x1b\\ \x1b[1;31mred\x1b[0m") == "link red"


def test_raised_where_is_the_deepest_frame_inside_the_submissions_folder(tmp_path):
    folder = tmp_path / "mine"
    tb = (f'Traceback (most recent call last):\n'
          f'  File "/repo/harness/worker/timing.py", line 200, in run_window\n    out = kernel(data)\n'
          f'  File "{folder}/submission.py", line 12, in custom_kernel\n    return launch(data)\n'
          f'  File "{folder}/helpers.py", line 30, in launch\n    compiled = cute.compile(k)\n'
          f'  File "/site-packages/cutlass/base_dsl/dsl.py", line 999, in compile\n    raise DSLRuntimeError(...)\n'
          f'DSLRuntimeError: ')
    assert judge.raised_where(tb, folder) == f"{folder}/helpers.py:30 in launch"
    assert judge.raised_where(tb, tmp_path / "other") is None
    failed = judge.call_failed(P.Failed("exception", "DSLRuntimeError", DSL_TEXT, tb), folder)
    lines = failed.message.splitlines()
    assert lines[0] == ("raised: DSLRuntimeError: error[INTERNAL]: The compiler hit an internal DSL problem while "
                        "compiling your code.")
    assert lines[4:6] == [f"at {folder}/helpers.py:30 in launch", "Traceback (most recent call last):"]
    assert "\x1b" not in failed.message


def test_console_shows_the_head_of_an_exception_and_where_it_was_raised(tmp_path):
    """Through a real worker: a sibling module raises an exception whose str() is blank and whose text is in a
    ``message`` attribute (as the CuTe DSL's DSLBaseError keeps it), in colour."""
    from click.testing import CliRunner

    from harness.cli.commands import main

    folder = tmp_path / "dsl_like"
    folder.mkdir()
    (folder / "helpers.py").write_text(
        "class DSLRuntimeError(Exception):\n"
        "    def __init__(self, message):\n"
        "        self.message = message\n"
        "        super().__init__('')\n"
        "\n"
        "def launch(data):\n"
        "    raise DSLRuntimeError('\\n\\x1b[91merror:\\x1b[0m Failed to verify IR\\n'\n"
        "                          '  \\x1b[91merror:\\x1b[0m op requires sm_100a\\n')\n")
    (folder / "submission.py").write_text("from helpers import launch\n\n\ndef custom_kernel(data):\n"
                                          "    return launch(data)\n")
    result = CliRunner().invoke(main, ["run", "--submission", str(folder / "submission.py"), "--no-store",
                                       "--shapes", "m: [64]; n: [128]; k: [256]", "--timeout", "120"])
    assert result.exit_code == ExitCode.CHECK_FAILED, result.output
    out = " ".join(result.stdout.split())
    assert "shape 1 error: raised: DSLRuntimeError: error: Failed to verify IR error: op requires sm_100a at " in out
    squash = "".join(result.stdout.split("sandbox: ")[0].split())  # a long path wraps at the console's width
    assert squash.endswith("".join(f"at {folder}/helpers.py:7 in launch".split()))


def test_a_real_cute_dsl_runtime_error_shows_its_words(tmp_path):
    """The CuTe DSL's own DSLRuntimeError (nvidia-cutlass-dsl, where installed) raised in custom_kernel: the
    console's first line names the DSL's headline, the next ones its error lines, colour codes gone."""
    pytest.importorskip("cutlass.base_dsl.common")
    from click.testing import CliRunner

    from harness.cli.commands import main

    sub = tmp_path / "dsl" / "submission.py"
    sub.parent.mkdir()
    sub.write_text("from cutlass.base_dsl.common import DSLRuntimeError\n\n\ndef custom_kernel(data):\n"
                   "    raise DSLRuntimeError('Failed to verify IR', cause=RuntimeError(\"'nvvm.tcgen05.alloc' op "
                   "requires sm_100a\"))\n")
    result = CliRunner().invoke(main, ["run", "--submission", str(sub), "--no-store", "--timeout", "300",
                                       "--shapes", "m: [64]; n: [128]; k: [256]"])
    assert result.exit_code == ExitCode.CHECK_FAILED, result.output
    out = " ".join(result.stdout.split())
    assert ("shape 1 error: raised: DSLRuntimeError: error[INTERNAL]: The compiler hit an internal DSL problem while "
            "compiling your code. note: This is a bug in the DSL, not a mistake in your kernel. error: Failed to "
            "verify IR error: Caused exception: 'nvvm.tcgen05.alloc' op requires sm_100a") in out
    squash = "".join(result.stdout.split())  # a long path wraps at the console's width
    assert "".join(f"at {sub}:5 in custom_kernel".split()) in squash and "\x1b" not in result.stdout
