#!POPCORN leaderboard nvfp4_group_gemm
#!POPCORN gpu B200
#!FP4BENCH requires sm_100a
"""cuda_inline: block-scaled NVFP4 grouped GEMM as C++/PTX for sm_100a, built with torch's load_inline.

One launch for all groups: one CTA per 128 x 64 output tile of a host-built tile list, TMA loads of A and B,
plain bulk copies of the blocked scales, tcgen05.mma kind::mxf4nvf4.block_scale.block16, 6 stages, 192 threads.
See README.md beside this file; the kernel is kernel.cu, the GPU-free host logic cuda_inline_host.py.

Nothing is compiled at import: the extension is built on the first call (minutes the first time, then served
from torch's extension cache). The kernel is launched on the default (legacy) queue, torch's current one in
fp4bench's worker and the official runner, which leave it so.
"""
from task import input_t, output_t

import torch

import cuda_inline_build
import cuda_inline_host as host

_extension = None
_map_cache: host.TensorMapCache | None = None
_plans: dict[tuple, host.Plan] = {}
_device_tiles: dict[tuple, torch.Tensor] = {}


def _built_extension():
    global _extension, _map_cache
    if _extension is None:
        _extension = cuda_inline_build.load_extension()
        _map_cache = host.TensorMapCache(_extension.encode_operand_map)
    return _extension


def _plan(problem_sizes) -> host.Plan:
    key = tuple(tuple(size) for size in problem_sizes)
    plan = _plans.get(key)
    if plan is None:
        plan = _plans[key] = host.make_plan(key)
    return plan


def _tiles_on(plan: host.Plan, device: torch.device) -> torch.Tensor:
    """The tile list as a device int32 [T, 4] tensor, uploaded once per shape set and device (a plain synchronous
    copy from pageable memory, never a pinned buffer that a later call could overwrite before it is read)."""
    key = (plan.sizes, device)
    tiles = _device_tiles.get(key)
    if tiles is None:
        tiles = _device_tiles[key] = torch.tensor(plan.tiles, dtype=torch.int32, device=device)
    return tiles


def custom_kernel(data: input_t) -> output_t:
    abc, _plain_scales, reordered_scales, problem_sizes = data
    plan = _plan(problem_sizes)  # ValueError for sizes the kernel does not support, before any build
    extension = _built_extension()
    a = [group[0] for group in abc]
    b = [group[1] for group in abc]
    c = [group[2] for group in abc]
    sfa = [group[0] for group in reordered_scales]
    sfb = [group[1] for group in reordered_scales]
    a_maps, b_maps = _map_cache.maps_for(plan, a, b)
    device = c[0].device
    extension.grouped_gemm(a, b, c, sfa, sfb, a_maps, b_maps, list(plan.mnk), _tiles_on(plan, device))
    return c
