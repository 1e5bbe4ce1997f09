"""What the NVFP4 problems share (torch is imported by the submodules, not here, so plugs load without it).

- ``formats``: e2m1 / e4m3fn decoding, the blocked 32x4x4 scale layout, fp4 packing, rounding to fp16, the check
  (re-exported from nvfp4_group_gemm's ``formats``, ``check`` and ``reference``, where they were written first).
- ``draw``: the official draws' building blocks and the full-range scales.
- ``exact``: exact fp64 products of block-scaled operands.
- ``dense``: the torch-free base of the plugs whose call returns one tensor (gemm, gemv, dual_gemm).
"""
