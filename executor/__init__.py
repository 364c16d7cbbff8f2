"""Real runs of a scenario's schedule with torch and transformers (work in progress)."""
