"""Building the cuda_inline extension: one place for the sources and the nvcc flags.

``load_extension()`` is the real path (``torch.utils.cpp_extension.load_inline``, needs a CUDA build of torch and
a GPU machine to link against libcuda); ``compile_object()`` runs the same nvcc compilation of kernel.cu on any
machine with the CUDA toolkit, torch's headers and no GPU, keeping the PTX and the object for inspection.

The module name is distinctive on purpose: a variant's folder goes first on sys.path, and a plain ``build`` would
collide with other variants' helpers or the PyPI package of that name.
"""
from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sysconfig
from pathlib import Path

HERE = Path(__file__).resolve().parent
KERNEL_SOURCE = HERE / "kernel.cu"
BINDINGS_SOURCE = HERE / "bindings.cpp"

#: Blackwell datacenter parts only: tcgen05, tensor memory and the FP4 MMA are architecture-specific ("a").
ARCH_FLAGS = ("-gencode=arch=compute_100a,code=sm_100a",)
#: nvcc flags of our own, added to torch's defaults by load_inline and by compile_object alike. The seed also had
#: --use_fast_math (nothing here needs fast transcendentals; it only adds flush-to-zero), -Xptxas=-v (log noise),
#: --extra-device-vectorization and --relocatable-device-code=false (the default).
CUDA_CFLAGS = ("-O3", *ARCH_FLAGS, "--expt-relaxed-constexpr", "-lineinfo")
#: cuTensorMapEncodeTiled and cuGetErrorString are driver API calls.
LDFLAGS = ("-lcuda",)
#: The C++ standard load_inline gives nvcc when no flag names one (torch >= 2.10 headers need C++20).
CXX_STANDARD = "-std=c++20"


def source_digest() -> str:
    """Hash of everything baked into the built extension: both sources and every flag."""
    h = hashlib.sha256()
    for part in (KERNEL_SOURCE.read_bytes(), BINDINGS_SOURCE.read_bytes(), repr((CUDA_CFLAGS, LDFLAGS)).encode()):
        h.update(part)
        h.update(b"\0")
    return h.hexdigest()[:16]


def extension_name() -> str:
    """A name per source/flag digest, so torch's extension cache never serves a stale build."""
    return f"fp4bench_cuda_inline_{source_digest()}"


def load_extension():
    """Compile (or reuse from torch's extension cache) and import the extension. Needs nvcc and CUDA torch."""
    from torch.utils.cpp_extension import load_inline

    return load_inline(
        name=extension_name(),
        cpp_sources=[BINDINGS_SOURCE.read_text()],
        cuda_sources=[KERNEL_SOURCE.read_text()],
        extra_cuda_cflags=list(CUDA_CFLAGS),
        extra_ldflags=list(LDFLAGS),
        with_cuda=True,
        verbose=False,
    )


def find_cuda_home() -> Path:
    """The CUDA toolkit: $CUDA_HOME or $CUDA_PATH, else the folder above the ``nvcc`` on PATH, else
    /usr/local/cuda. Raises FileNotFoundError naming what was tried (callers must not skip on it)."""
    tried = []
    for var in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(var):
            tried.append(Path(os.environ[var]))
    nvcc = shutil.which("nvcc")
    if nvcc:
        tried.append(Path(nvcc).resolve().parent.parent)
    tried.append(Path("/usr/local/cuda"))
    for home in tried:
        if (home / "bin" / "nvcc").is_file():
            return home
    raise FileNotFoundError(f"no CUDA toolkit with bin/nvcc; tried {', '.join(map(str, tried))}")


def _common_flags() -> list[str]:
    """Defines and include folders load_inline gives both compilers."""
    from torch.utils.cpp_extension import include_paths

    includes = [*include_paths(), sysconfig.get_paths()["include"]]
    return [
        f"-DTORCH_EXTENSION_NAME={extension_name()}",
        "-DTORCH_API_INCLUDE_EXTENSION_H",
        *(f"-I{path}" for path in includes),
    ]


def nvcc_command(source: Path, output: Path, extra: tuple[str, ...] = ()) -> list[str]:
    """The nvcc line load_inline runs for kernel.cu (its defines, torch's COMMON_NVCC_FLAGS, include folders, -fPIC,
    our CUDA_CFLAGS, the C++ standard), plus ``-include torch/extension.h`` and ``extra``."""
    from torch.utils.cpp_extension import COMMON_NVCC_FLAGS

    return [
        str(find_cuda_home() / "bin" / "nvcc"),
        *_common_flags(),
        *COMMON_NVCC_FLAGS,
        "--compiler-options", "-fPIC",
        *CUDA_CFLAGS,
        CXX_STANDARD,
        "-include", "torch/extension.h",
        *extra,
        "-c", str(source),
        "-o", str(output),
    ]


def _run(cmd: list[str], cwd: Path) -> None:
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{Path(cmd[0]).name} failed ({proc.returncode}):\n{' '.join(cmd)}\n"
                           f"{proc.stdout}\n{proc.stderr}")


def compile_object(out_dir: Path) -> Path:
    """Compile kernel.cu for sm_100a into ``out_dir/kernel.o``, keeping nvcc's intermediates (``*.ptx``,
    ``*.cubin``) in ``out_dir``. Raises RuntimeError with nvcc's output when the compilation fails."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    obj = out_dir / "kernel.o"
    _run(nvcc_command(KERNEL_SOURCE, obj, extra=("-keep", f"-keep-dir={out_dir}")), out_dir)
    return obj


def compile_bindings_object(out_dir: Path) -> Path:
    """Compile bindings.cpp with the host C++ compiler into ``out_dir/bindings.o``, as load_inline compiles its
    main.cpp (with the CUDA include folder, since the extension is built with_cuda). Linking it against
    kernel.o needs libcuda and torch's CUDA libraries, so a GPU-free check compares symbol tables instead."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    obj = out_dir / "bindings.o"
    cxx = os.environ.get("CXX") or shutil.which("c++") or "c++"
    cmd = [cxx, *_common_flags(), f"-I{find_cuda_home() / 'include'}", "-fPIC", CXX_STANDARD,
           "-c", str(BINDINGS_SOURCE), "-o", str(obj)]
    _run(cmd, out_dir)
    return obj
