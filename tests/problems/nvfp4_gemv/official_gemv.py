"""A faithful copy of the official nvfp4_gemv ``generate_input`` (reference-kernels
problems/nvidia/nvfp4_gemv/reference.py): the same torch calls in the same order on the global CUDA generator,
written for these tests (CUDA only). The GPU tests compare problems.nvfp4_gemv.inputs with it bit for bit."""
import torch


def _scales(l, mn, sf_k):
    plain = torch.randint(0, 3, (l, mn, sf_k), dtype=torch.int8, device="cuda").to(torch.float8_e4m3fn)
    plain = plain.permute(1, 2, 0)
    shape = (l, -(-mn // 128), -(-sf_k // 4), 32, 4, 4)
    blocked = torch.randint(0, 3, shape, dtype=torch.int8, device="cuda").to(torch.float8_e4m3fn)
    blocked = blocked.permute(3, 4, 1, 5, 2, 0)
    i, j, b = torch.meshgrid(torch.arange(mn, device="cuda"), torch.arange(sf_k, device="cuda"),
                             torch.arange(l, device="cuda"), indexing="ij")
    blocked[i % 32, (i % 128) // 32, i // 128, j % 4, j // 4, b] = plain[i, j, b]
    return plain.cpu(), blocked


def generate_input(m, k, l, seed):
    torch.manual_seed(seed)
    a = torch.randint(0, 4, (l, m, k // 2), dtype=torch.uint8, device="cuda").permute(1, 2, 0)
    b = torch.randint(0, 4, (l, 128, k // 2), dtype=torch.uint8, device="cuda").permute(1, 2, 0)
    a, b = a.view(torch.float4_e2m1fn_x2), b.view(torch.float4_e2m1fn_x2)
    c = torch.randn((l, m, 1), dtype=torch.float16, device="cuda").permute(1, 2, 0)
    sf_k = -(-k // 16)
    sfa, sfa_p = _scales(l, m, sf_k)
    sfb, sfb_p = _scales(l, 128, sf_k)
    return a, b, sfa.to("cuda"), sfb.to("cuda"), sfa_p, sfb_p, c
