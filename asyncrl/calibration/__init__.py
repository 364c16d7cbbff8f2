"""Calibration: from short real runs of a scenario, and from a framework's metrics logs."""
