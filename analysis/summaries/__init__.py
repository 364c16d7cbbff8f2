"""The tables of sizing, sweeps, studies and validate, and plan's verdict."""
