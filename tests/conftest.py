"""Shared test set-up: GPU tests are skipped without CUDA; helpers to run the harness on a submission file."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent
CASES = Path(__file__).resolve().parent / "cases"
SHARED_CASES = CASES / "shared"
ADVERSARIAL = CASES / "adversarial"
#: Why a test marked ``gpu`` is skipped on a machine without CUDA.
GPU_SKIP_REASON = "needs a CUDA GPU (sm_90)"


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason=GPU_SKIP_REASON)
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
