"""`python -m robot_rl.cli …`: the same as the `robot-rl` console script."""

import sys

from robot_rl.cli import main

sys.exit(main())
