"""One module per paper figure or table; importing a module registers it."""
