"""Catalogues: device datasheets, model presets, the cost model's terms and their sources, memory fit, profiles."""
