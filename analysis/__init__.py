"""Analysis: reads run records and logs, runs nothing (records, fits, plots, summaries)."""
