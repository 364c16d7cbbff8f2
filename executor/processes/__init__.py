"""A run's processes: the runtime, the coordinator, actor processes, channels, restarts, weight sync."""
