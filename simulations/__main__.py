"""``python -m simulations``: same as the ``rlvr-sim`` command."""

import sys

from .cli import main

sys.exit(main())
