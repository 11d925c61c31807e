"""A digital twin that calibrates itself from logs (system identification; docs/real2sim.md)."""
