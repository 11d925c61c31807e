"""Humans in the loop: teleop devices, the intervention controller, `robot-rl deploy` and the HIL-SERL learner."""
