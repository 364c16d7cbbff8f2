"""The workflows that run both backends: demo, validate, study."""
