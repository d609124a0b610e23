"""``python -m analysis`` = ``rlvr-diff``."""

from .diff_cli import main_exit

main_exit()
