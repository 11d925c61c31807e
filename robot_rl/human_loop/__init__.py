"""Humans in the loop: teleop devices and the intervention controller (interventions, success keys)."""
