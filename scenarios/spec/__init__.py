"""The scenario: its model, its sections and schedule kinds, loading and overrides, length distributions."""
