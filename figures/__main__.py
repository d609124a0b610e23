"""``python -m figures``: same as the ``rlvr-figures`` command."""

from .cli import main_exit

main_exit()
