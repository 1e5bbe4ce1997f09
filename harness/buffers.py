"""Byte buffers the trusted parent owns and the worker maps: where a sample's inputs and outputs cross.

- CUDA: memory from the driver (cuMemAlloc), exported with cuIpcGetMemHandle; the worker maps it with
  cuIpcOpenMemHandle. Ours from end to end (no torch reference counting files), so a worker that dies leaves
  nothing pinned in the parent, and the parent frees it when the worker is gone.
- CPU: an anonymous memory file (memfd_create) mapped in both processes; its descriptor travels over a Unix
  socket (SCM_RIGHTS). On a GPU run the parent page-locks its mapping (cudaHostRegister) so device-to-host copies
  of the plain scales run at full speed.

Both sides get a flat uint8 tensor over the bytes. The parent (harness.parent.samples) and the worker import this
module; it imports only harness.protocol (BufferRef, the wire form of a buffer).
"""
from __future__ import annotations

import ctypes
import fcntl
import mmap
import os
import socket
import weakref

import torch

from harness.protocol import BufferRef


class SharedBufferError(RuntimeError):
    """A buffer could not be made, exported or mapped (the message names the call and its error code)."""


class _Handle(ctypes.Structure):
    _fields_ = [("reserved", ctypes.c_char * 64)]


_driver = None


def _cuda():
    """libcuda with the prototypes used here (loaded once)."""
    global _driver
    if _driver is None:
        lib = ctypes.CDLL("libcuda.so.1")
        u64p = ctypes.POINTER(ctypes.c_uint64)
        for name, args in (("cuMemAlloc_v2", [u64p, ctypes.c_size_t]), ("cuMemFree_v2", [ctypes.c_uint64]),
                           ("cuIpcGetMemHandle", [ctypes.POINTER(_Handle), ctypes.c_uint64]),
                           ("cuIpcOpenMemHandle_v2", [u64p, _Handle, ctypes.c_uint]),
                           ("cuIpcCloseMemHandle", [ctypes.c_uint64]),
                           ("cuStreamWaitValue32_v2", [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint32, ctypes.c_uint]),
                           ("cuStreamWriteValue32_v2", [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint32, ctypes.c_uint])):
            fn = getattr(lib, name)
            fn.argtypes, fn.restype = args, ctypes.c_int
        _driver = lib
    return _driver


def _check(code: int, what: str) -> None:
    if code != 0:
        raise SharedBufferError(f"{what} failed with CUDA driver error {code}")


#: CU_STREAM_WAIT_VALUE_GEQ (cuda.h, CUstreamWaitValue_flags): wait until (int32)(*addr - value) >= 0.
_WAIT_GEQ = 0x0
#: How many 32-bit flag words the bracket uses (harness.parent.bracket: ready, go, end_calls, end_copy).
FLAG_WORDS = 4
READY, GO, END_CALLS, END_COPY = range(FLAG_WORDS)


def stream_wait_flag(stream: int, flags_ptr: int, word: int, value: int) -> None:
    """Queue on ``stream`` (a CUstream handle) a wait until flag word ``word`` at ``flags_ptr`` (device memory)
    holds ``value`` or more (cuStreamWaitValue32). Raises SharedBufferError when the driver refuses."""
    _check(_cuda().cuStreamWaitValue32_v2(stream, flags_ptr + 4 * word, value, _WAIT_GEQ), "cuStreamWaitValue32")


def stream_write_flag(stream: int, flags_ptr: int, word: int, value: int) -> None:
    """Queue on ``stream`` a write of ``value`` to flag word ``word`` (cuStreamWriteValue32), after the work queued
    before it. Raises SharedBufferError when the driver refuses."""
    _check(_cuda().cuStreamWriteValue32_v2(stream, flags_ptr + 4 * word, value, 0), "cuStreamWriteValue32")


class _CudaArray:
    """The __cuda_array_interface__ torch.as_tensor reads to wrap a device pointer without a copy."""

    def __init__(self, ptr: int, nbytes: int):
        self.__cuda_array_interface__ = {"shape": (nbytes,), "typestr": "|u1", "data": (ptr, False), "version": 2}


def _wrap_cuda(ptr: int, nbytes: int, device: int) -> torch.Tensor:
    return torch.as_tensor(_CudaArray(ptr, nbytes), device=torch.device("cuda", device))


_libc = None


def _map_shared(fd: int, nbytes: int) -> torch.Tensor:
    """``fd`` mapped read-write and shared, as a uint8 tensor; unmapped when the last view of it is gone.

    Through libc, not Python's mmap module: mmap.mmap keeps a duplicate of the descriptor open for as long as
    the mapping lives, and a submission that writes to every descriptor it can would write into the inputs."""
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
        _libc.mmap.restype = ctypes.c_void_p
        _libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                               ctypes.c_long]
        _libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    ptr = _libc.mmap(None, nbytes, mmap.PROT_READ | mmap.PROT_WRITE, mmap.MAP_SHARED, fd, 0)
    if ptr in (None, ctypes.c_void_p(-1).value):
        raise SharedBufferError(f"mmap of {nbytes} bytes failed: {os.strerror(ctypes.get_errno())}")
    array = (ctypes.c_uint8 * nbytes).from_address(ptr)
    weakref.finalize(array, _libc.munmap, ptr, nbytes)
    return torch.frombuffer(array, dtype=torch.uint8, count=nbytes)


class SharedBuffer:
    """Parent side: ``nbytes`` on ``device`` (cuda: device memory; cpu: a memory file), as ``.tensor`` (uint8).
    ``pin`` page-locks a CPU buffer for fast copies from a GPU. Raises SharedBufferError when the driver refuses."""

    def __init__(self, nbytes: int, device: torch.device, pin: bool = False):
        self.nbytes, self.device = max(int(nbytes), 1), torch.device(device)
        self._ptr = self._fd = None
        self._pinned = False
        if self.device.type == "cuda":
            torch.cuda.init()
            torch.empty(1, device=self.device)  # the primary context is current on this thread
            ptr = ctypes.c_uint64()
            _check(_cuda().cuMemAlloc_v2(ctypes.byref(ptr), self.nbytes), f"cuMemAlloc({self.nbytes} bytes)")
            self._ptr = ptr.value
            handle = _Handle()
            _check(_cuda().cuIpcGetMemHandle(ctypes.byref(handle), self._ptr), "cuIpcGetMemHandle")
            self._handle = ctypes.string_at(ctypes.addressof(handle), 64).hex()
            self.tensor = _wrap_cuda(self._ptr, self.nbytes, self.device.index or 0)
        else:
            self._fd = os.memfd_create("fp4bench-buffer", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
            os.ftruncate(self._fd, self.nbytes)
            # Its size is final: a worker holding the descriptor can no longer shrink the file under the parent's
            # mapping (the parent's next read of a lost page would die of SIGBUS) nor grow it, nor lift the seals.
            fcntl.fcntl(self._fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SEAL)
            self.tensor = _map_shared(self._fd, self.nbytes)
            if pin and torch.cuda.is_available():
                self._pinned = torch.cuda.cudart().cudaHostRegister(self.tensor.data_ptr(), self.nbytes, 0) == 0

    @property
    def ptr(self) -> int | None:
        """The device address (CUDA buffers), else None."""
        return self._ptr

    def ref(self) -> BufferRef:
        """What the worker needs to map this buffer (plus, for memfd, ``fd`` sent alongside)."""
        if self._ptr is not None:
            return BufferRef("cuda", self.nbytes, self.device.index or 0, self._handle)
        return BufferRef("memfd", self.nbytes)

    @property
    def fd(self) -> int | None:
        return self._fd

    def close(self) -> None:
        """Free the memory. Call only when no worker maps it any more (it exited, or unmapped it)."""
        if self._pinned:
            torch.cuda.cudart().cudaHostUnregister(self.tensor.data_ptr())
            self._pinned = False
        self.tensor = None
        if self._ptr is not None:
            torch.cuda.synchronize(self.device)
            _cuda().cuMemFree_v2(self._ptr)
            self._ptr = None

        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


class MappedBuffer:
    """Worker side: a parent's buffer mapped here, as ``.tensor`` (uint8). Raises SharedBufferError if mapping fails."""

    def __init__(self, ref: BufferRef, fd: int | None = None):
        self.ref = ref
        self._ptr = None
        if ref.kind == "cuda":
            handle = _Handle()
            ctypes.memmove(ctypes.addressof(handle), bytes.fromhex(ref.handle), 64)
            ptr = ctypes.c_uint64()
            torch.empty(1, device=torch.device("cuda", ref.device))  # make the primary context current
            _check(_cuda().cuIpcOpenMemHandle_v2(ctypes.byref(ptr), handle, 1), "cuIpcOpenMemHandle")
            self._ptr = ptr.value
            self.tensor = _wrap_cuda(self._ptr, ref.nbytes, ref.device)
            self.ptr = self._ptr
        elif ref.kind == "memfd":
            if fd is None:
                raise SharedBufferError("a memfd buffer arrived without its descriptor")
            self.tensor = _map_shared(fd, ref.nbytes)
            os.close(fd)  # the mapping stays; no descriptor to it remains here
        else:
            raise SharedBufferError(f"unknown buffer kind {ref.kind!r} (expected cuda or memfd)")

    def close(self) -> None:
        self.tensor = None
        if self._ptr is not None:
            torch.cuda.synchronize()
            _cuda().cuIpcCloseMemHandle(self._ptr)
            self._ptr = None


def send_fds(sock: socket.socket, fds: list[int]) -> None:
    """Send descriptors (SCM_RIGHTS) with a one-byte message per batch."""
    if fds:
        socket.send_fds(sock, [b"F"], fds)


def recv_fds(sock: socket.socket, count: int) -> list[int]:
    """Receive ``count`` descriptors sent by ``send_fds``. Raises SharedBufferError if fewer arrive."""
    if not count:
        return []
    _msg, fds, _flags, _addr = socket.recv_fds(sock, 1, count)
    if len(fds) != count:
        raise SharedBufferError(f"expected {count} buffer descriptors, got {len(fds)}")
    return list(fds)
