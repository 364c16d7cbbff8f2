"""Input and output safety: limits, one-line errors, guarded readers, whole-file writes, process pools."""
