"""NVIDIA's cuda-bindings as a replacement for harness.buffers' ctypes prototypes (docs/architecture.md, "libcuda
through ctypes, not cuda-bindings"): on a GPU, every driver call buffers.py makes, through cuda-bindings, against the
ctypes path it would replace (same flag words, IPC handles each side can open, page-locking), and no CUDA context
made by importing it. Evidence for a switch, not a switch: harness/ still uses ctypes. Skipped where cuda-bindings
does not import."""
from __future__ import annotations

import ctypes
import os
import subprocess
import sys

import pytest
import torch

from harness.buffers import READY, GO, SharedBuffer, stream_wait_flag, stream_write_flag

driver = pytest.importorskip("cuda.bindings.driver")

pytestmark = pytest.mark.gpu

OK = driver.CUresult.CUDA_SUCCESS
GEQ = driver.CUstreamWaitValue_flags.CU_STREAM_WAIT_VALUE_GEQ

#: A fresh process: import cuda-bindings, make a driver call, then ask whether device 0's primary context exists.
NO_CONTEXT = r"""
import cuda.bindings.driver as d
err, version = d.cuDriverGetVersion()
assert d.cuInit(0)[0] == d.CUresult.CUDA_SUCCESS
err_dev, dev = d.cuDeviceGet(0)
err_state, flags, active = d.cuDevicePrimaryCtxGetState(dev)
err_ctx, ctx = d.cuCtxGetCurrent()
print(int(err), version, int(err_state), int(active), int(ctx))
"""

#: A child that opens a parent's IPC handle (hex on argv) with cuda-bindings, reads 4 bytes, sets byte 100 to 7.
OPEN_WITH_BINDINGS = r"""
import ctypes, sys, torch
import cuda.bindings.driver as d
torch.empty(1, device="cuda")  # the primary context current, as in the worker
raw = ctypes.create_string_buffer(bytes.fromhex(sys.argv[1]), 64)
err, ptr = d.cuIpcOpenMemHandle(d.CUipcMemHandle(_ptr=ctypes.addressof(raw)),
                                d.CUipcMem_flags.CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS)
assert err == d.CUresult.CUDA_SUCCESS, err
host = bytearray(4)
assert d.cuMemcpyDtoH(host, ptr, 4)[0] == d.CUresult.CUDA_SUCCESS
assert d.cuMemsetD8(int(ptr) + 100, 7, 1)[0] == d.CUresult.CUDA_SUCCESS
assert d.cuCtxSynchronize()[0] == d.CUresult.CUDA_SUCCESS
assert d.cuIpcCloseMemHandle(ptr)[0] == d.CUresult.CUDA_SUCCESS
print(list(host))
"""

#: A child that opens a cuda-bindings handle with today's ctypes path (harness.buffers.MappedBuffer).
OPEN_WITH_CTYPES = r"""
import sys
from harness.buffers import MappedBuffer
from harness.protocol import BufferRef
buf = MappedBuffer(BufferRef("cuda", 4096, 0, sys.argv[1]))
print(buf.tensor[:4].tolist())
buf.tensor[100] = 7
buf.close()
"""


def _child(script: str, *args: str) -> str:
    env = dict(os.environ, PYTHONPATH=os.getcwd())
    proc = subprocess.run([sys.executable, "-c", script, *args], capture_output=True, text=True, timeout=120,
                          env=env, cwd=os.getcwd())
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout.strip()


def test_importing_and_calling_cuda_bindings_makes_no_context():
    err, version, err_state, active, ctx = map(int, _child(NO_CONTEXT).split())
    assert (err, err_state) == (0, 0)
    assert version >= 13000  # cuda-bindings 13 needs a CUDA 13 driver (580+)
    assert (active, ctx) == (0, 0)  # no primary context was made, none is current


def test_flag_words_written_and_awaited_through_bindings_match_the_ctypes_path():
    flags = SharedBuffer(16, torch.device("cuda", 0))
    words = flags.tensor.view(torch.int32)
    words.zero_()
    stream = torch.cuda.current_stream().cuda_stream
    assert driver.cuStreamWriteValue32(stream, flags.ptr + 4 * READY, 5, 0)[0] == OK
    assert driver.cuStreamWaitValue32(stream, flags.ptr + 4 * READY, 5, GEQ)[0] == OK
    assert driver.cuStreamWriteValue32(stream, flags.ptr + 4 * GO, 9, 0)[0] == OK
    torch.cuda.synchronize()
    by_bindings = words.tolist()
    words.zero_()
    stream_write_flag(stream, flags.ptr, READY, 5)
    stream_wait_flag(stream, flags.ptr, READY, 5)
    stream_write_flag(stream, flags.ptr, GO, 9)
    torch.cuda.synchronize()
    assert by_bindings == words.tolist() == [5, 9, 0, 0]
    flags.close()


def test_a_ctypes_ipc_handle_opens_through_bindings():
    shared = SharedBuffer(4096, torch.device("cuda", 0))
    shared.tensor.zero_()
    shared.tensor[:4] = torch.tensor([1, 2, 3, 4], dtype=torch.uint8)
    torch.cuda.synchronize()
    assert _child(OPEN_WITH_BINDINGS, shared.ref().handle) == "[1, 2, 3, 4]"
    assert int(shared.tensor[100]) == 7
    shared.close()


def test_a_bindings_ipc_handle_opens_through_ctypes():
    torch.empty(1, device="cuda")  # the primary context current, as SharedBuffer makes it
    err, ptr = driver.cuMemAlloc(4096)
    assert err == OK
    assert driver.cuMemsetD32(ptr, 0x04030201, 1024)[0] == OK
    err, handle = driver.cuIpcGetMemHandle(ptr)
    assert err == OK
    assert driver.cuCtxSynchronize()[0] == OK
    assert _child(OPEN_WITH_CTYPES, ctypes.string_at(handle.getPtr(), 64).hex()) == "[1, 2, 3, 4]"
    host = bytearray(1)
    assert driver.cuMemcpyDtoH(host, int(ptr) + 100, 1)[0] == OK
    assert host[0] == 7
    assert driver.cuMemFree(ptr)[0] == OK


def test_a_memfd_mapping_is_page_locked_through_bindings():
    torch.empty(1, device="cuda")
    shared = SharedBuffer(1 << 20, torch.device("cpu"))
    assert driver.cuMemHostRegister(shared.tensor.data_ptr(), shared.nbytes, 0)[0] == OK
    device = torch.arange(256, dtype=torch.uint8, device="cuda").repeat(4096)
    shared.tensor.copy_(device)
    assert torch.equal(shared.tensor[:256].cpu(), torch.arange(256, dtype=torch.uint8))
    assert driver.cuMemHostUnregister(shared.tensor.data_ptr())[0] == OK
    shared.close()
