"""Figures (PNG, no pyplot) and the report page."""
