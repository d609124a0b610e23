"""analysis: measurement of matrices, checkpoints and samples (spectra, checkpoint diff,
hidden-state geometry, pass@k).  Empty until the sampling-theory and checkpoint-diff
issues land; see ../shared/DESIGN.md for the plan."""
