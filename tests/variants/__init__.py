"""Tests of the kernel variants under submissions/ (one module per variant)."""
