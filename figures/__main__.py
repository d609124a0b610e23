"""``python -m figures``: same as the ``rlvr-figures`` command."""

import sys

from .cli import main

sys.exit(main())
