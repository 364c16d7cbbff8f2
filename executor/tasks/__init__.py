"""What actors generate and how it is scored: tasks generated in code, prompt tasks, the work."""
