"""``python -m rlvr_theory``: same as the ``rlvr-theory`` command."""

import sys

from .cli import main

sys.exit(main())
