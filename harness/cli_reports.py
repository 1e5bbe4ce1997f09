"""Report commands (leaderboard, report, history) attached to the CLI group. Placeholder until the store lands."""


def register(group) -> None:
    """Attach the report commands to the click ``group``."""
