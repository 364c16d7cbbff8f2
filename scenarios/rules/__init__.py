"""The schedule rules both backends call (pure functions) and the schedule state they hold."""
