"""``python -m agentspec.cli``: the same as the ``agentspec`` script."""

import sys

from agentspec.cli import main

sys.exit(main())
