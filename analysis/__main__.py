"""``python -m analysis`` = ``rlvr-diff``."""

from .diff.cli import main_exit

main_exit()
