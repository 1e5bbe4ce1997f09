"""Kind: numerics only the official data hides. Source: the brief's "numerics only official data hides";
docs/modes.md says full-range data is what tells such a kernel apart, and it is opt-in (`--data full-range`).

The trick: official data has e2m1 magnitudes 0, 0.5, 1 and 1.5 only (bit 2 of every nibble masked off) and scales
1.0 or 2.0 only. This kernel decodes a nibble as (code & 3) / 2 with its sign, ignoring bit 2 (magnitudes 2, 3, 4
and 6 come out as 0 .. 1.5), and a scale byte as 1.0 when it is 0x38, else 2.0; then it multiplies in int8-range
integers held in fp32 (values x2 x scale are integers in [-6, 6]) and divides by 4 at the end. Every output of the
official draw is right bit for bit; on full-range data almost every output is wrong. With the default data every
case passes.

What a correct harness must do: check at least one call per case on full-range data (or make it the default for
the correctness call) when its reports speak of a correct NVFP4 kernel, or say in every record that only the
official subset was checked."""
import torch

_ONE = 0x38


def _ints(x, sf):
    u = x[:, :, 0].view(torch.uint8)
    pair = torch.stack([u & 15, u >> 4], -1).flatten(1)
    mag = (pair & 3).float()                      # 2 x value for codes 0..3; bit 2 ignored
    val = torch.where(pair & 8 > 0, -mag, mag)
    scale = torch.where(sf[:, :, 0].view(torch.uint8) == _ONE, 1.0, 2.0)
    return val * scale.repeat_interleave(16, 1)


def custom_kernel(data):
    abc, sfab, _, _sizes = data
    out = []
    for (a, b, c), (sfa, sfb) in zip(abc, sfab):
        c[:, :, 0] = ((_ints(a, sfa) @ _ints(b, sfb).T) * 0.25).half()
        out.append(c)
    return out
