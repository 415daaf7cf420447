"""Run the baton command line: `python -m bot ...`."""

import sys

from bot.ops.cli import main

sys.exit(main())
