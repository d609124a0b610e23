"""``python -m simulations.grpo`` = ``rlvr-train``."""

from .cli import main_exit

main_exit()
