"""``python -m harness ...`` from the repo root, with no install."""
from harness.cli.commands import main

main()
