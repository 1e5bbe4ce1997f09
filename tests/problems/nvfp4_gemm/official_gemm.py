"""A faithful copy of the official nvfp4_gemm ``generate_input`` (reference-kernels
problems/nvidia/nvfp4_gemm/reference.py): the same torch calls in the same order on the global CUDA generator,
written for these tests (CUDA only). The GPU tests compare problems.nvfp4_gemm.inputs with it bit for bit."""
import torch


def _scales(l, mn, sf_k, low, high):
    plain = torch.randint(low, high, (l, mn, sf_k), dtype=torch.int8, device="cuda").to(torch.float8_e4m3fn)
    plain = plain.permute(1, 2, 0)
    shape = (l, -(-mn // 128), -(-sf_k // 4), 32, 4, 4)
    blocked = torch.randint(low, high, shape, dtype=torch.int8, device="cuda").to(torch.float8_e4m3fn)
    blocked = blocked.permute(3, 4, 1, 5, 2, 0)
    i, j, b = torch.meshgrid(torch.arange(mn, device="cuda"), torch.arange(sf_k, device="cuda"),
                             torch.arange(l, device="cuda"), indexing="ij")
    blocked[i % 32, (i % 128) // 32, i // 128, j % 4, j // 4, b] = plain[i, j, b]
    return plain.cpu(), blocked


def generate_input(m, n, k, l, seed):
    torch.manual_seed(seed)
    a = torch.randint(-128, 128, (l, m, k // 2), dtype=torch.int8, device="cuda").permute(1, 2, 0)
    b = torch.randint(-128, 128, (l, n, k // 2), dtype=torch.int8, device="cuda").permute(1, 2, 0)
    a, b = a.view(torch.float4_e2m1fn_x2), b.view(torch.float4_e2m1fn_x2)
    c = torch.randn((l, m, n), dtype=torch.float16, device="cuda").permute(1, 2, 0)
    sf_k = -(-k // 16)
    sfa, sfa_p = _scales(l, m, sf_k, 0, 4)
    sfb, sfb_p = _scales(l, n, sf_k, 0, 4)
    return a, b, sfa.to("cuda"), sfb.to("cuda"), sfa_p, sfb_p, c
