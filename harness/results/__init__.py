"""What a run leaves: records, statistics, rankings and the SQLite store. Imports nothing from parent or report."""
