"""analysis: measurement of matrices, checkpoints and samples.

Today: :mod:`~analysis.spectra` (singular values and rank metrics of any matrix, numpy or
torch, CPU or CUDA) and :mod:`~analysis.passk` (pass@k estimation, scaling-law and
solve-rate fits, bootstrap, paired subsampling test).  Checkpoint diff, hidden-state
geometry and reports come with the checkpoint-diff issue (see ../shared/DESIGN.md).
Submodules are imported on use (``from analysis import spectra``) so that importing the
package does not load torch.
"""
