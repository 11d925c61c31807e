"""Humans in the loop: teleop devices, `robot-rl deploy`/`record`, HIL-SERL, asking for help, fleets.

The teleop contract and the takeover controller are in :mod:`robot_rl.hardware` (``teleop``, ``intervention``), and
the graded schedule that ``loop.hil`` switches on in :mod:`robot_rl.hil`: the training loop uses those, and this
package builds on the loop, never the reverse. This ``__init__`` imports nothing.
"""
