"""simulations: categorical bandit, linear-head policy and GRPO trainer.  Empty until
the simulator and trainer issues land; see ../shared/DESIGN.md for the plan."""
