"""Scenarios and the schedule rules both backends share."""
