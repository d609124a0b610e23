"""Adapters that run the registry's advantages and schedules inside other trainers.

``integrations.trl`` (TRL's ``GRPOTrainer``) and ``integrations.verl`` (a verl plugin) need
their optional extras (``pip install "rlvr-diagnostics[trl]"`` / ``[verl]``);
``integrations.core`` is what both share.  Nothing in the toolkit imports this package.
"""
