"""plan's workflow and the intervals every answer carries."""
