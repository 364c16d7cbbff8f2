"""Records read back: comparisons, time by phase, traces, the exactly-once check."""
