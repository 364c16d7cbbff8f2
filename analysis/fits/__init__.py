"""Every fit: profiles from runs, the cost model's terms, length distributions, the staleness penalty."""
