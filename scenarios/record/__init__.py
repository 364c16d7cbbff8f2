"""The run as a value: events and summary.json, the one summarizer, run directories and their locks."""
