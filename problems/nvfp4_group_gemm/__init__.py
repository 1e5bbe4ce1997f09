"""nvfp4_group_gemm: block-scaled NVFP4 grouped GEMM. For now the problem lives in ``task/`` (its types:
``task.input_t``, ``task.output_t``); ``plug.PROBLEM`` adapts it to harness/problem.py's contract without moving
anything. Stage 2 of issue 43 moves ``task/`` here."""
