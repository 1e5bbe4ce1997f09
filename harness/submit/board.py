"""The facts of the nvfp4_group_gemm board that exporting and checking a submission need, in one place.

Sources: GPU MODE reference-kernels ``problems/nvidia/nvfp4_group_gemm`` (the runner's files: ``task.py`` defines
``input_t``, ``output_t`` and ``TestSpec``) and the competition's announcement (the board runs B200 only);
docs/submitting.md says more.
"""
from __future__ import annotations

from harness import ROOT

#: The leaderboard's name, as ``#!POPCORN leaderboard`` must give it.
LEADERBOARD = "nvfp4_group_gemm"
#: The GPUs the board runs, as ``#!POPCORN gpu`` names them, with (compute capability major, minor).
BOARD_GPUS: dict[str, tuple[int, int]] = {"B200": (10, 0)}
#: Full names of the board's GPUs, as a variant's requirement check words them.
GPU_NAMES = {"B200": "NVIDIA B200"}
#: The modules the official runner writes beside ``submission.py`` (a submission may import these).
RUNNER_MODULES = ("task", "utils", "reference")
#: What the runner's ``task.py`` defines (``from task import ...`` may take only these).
TASK_NAMES = ("input_t", "output_t", "TestSpec")
#: fp4bench helpers that ``export`` inlines, by import name (``task`` being the problem's package in fp4bench's
#: worker, harness.worker.task_alias): they hold no state and import only torch.
INLINED_HELPERS = {"task.formats": ROOT / "problems" / "nvfp4_group_gemm" / "formats.py"}
