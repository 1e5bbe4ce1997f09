"""A faithful copy of the official nvfp4_dual_gemm ``generate_input`` (reference-kernels
problems/nvidia/nvfp4_dual_gemm/reference.py): the same torch calls in the same order on the global CUDA
generator, written for these tests (CUDA only), ``torch.empty`` blocked storage included (undefined padding).
The GPU tests compare problems.nvfp4_dual_gemm.inputs with it bit for bit (padding aside)."""
import torch


def _fp4(l, mn, k):
    raw = torch.randint(255, size=(l, mn, k // 2), dtype=torch.uint8, device="cuda") & 0b1011_1011
    return raw.permute(1, 2, 0).view(torch.float4_e2m1fn_x2)


def _scales(l, mn, sf_k):
    plain = torch.rand((l, mn, sf_k), dtype=torch.float32, device="cuda").to(torch.float8_e4m3fn)
    plain = plain.permute(1, 2, 0)
    shape = (l, -(-mn // 128), -(-sf_k // 4), 32, 4, 4)
    blocked = torch.empty(shape, dtype=torch.int8, device="cuda").to(torch.float8_e4m3fn)
    blocked = blocked.permute(3, 4, 1, 5, 2, 0)
    i, j, b = torch.meshgrid(torch.arange(mn, device="cuda"), torch.arange(sf_k, device="cuda"),
                             torch.arange(l, device="cuda"), indexing="ij")
    blocked[i % 32, (i % 128) // 32, i // 128, j % 4, j // 4, b] = plain[i, j, b]
    return plain.cpu(), blocked


def generate_input(m, n, k, l, seed):
    torch.manual_seed(seed)
    a, b1, b2 = _fp4(l, m, k), _fp4(l, n, k), _fp4(l, n, k)
    c = torch.randn((l, m, n), dtype=torch.float16, device="cuda").permute(1, 2, 0)
    sf_k = -(-k // 16)
    sfa, sfa_p = _scales(l, m, sf_k)
    sfb1, sfb1_p = _scales(l, n, sf_k)
    sfb2, sfb2_p = _scales(l, n, sf_k)
    return (a, b1, b2, sfa.to("cuda"), sfb1.to("cuda"), sfb2.to("cuda"), sfa_p, sfb1_p, sfb2_p, c)
