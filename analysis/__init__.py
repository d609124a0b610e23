"""analysis: measurement of matrices, checkpoints and samples.

:mod:`~analysis.spectra` (singular values and rank metrics of any matrix, numpy or torch, CPU
or CUDA), :mod:`~analysis.passk` (pass@k estimation, scaling-law and solve-rate fits,
bootstrap, paired subsampling test), :mod:`~analysis.checkpoints` (Hugging Face checkpoint
directories streamed one tensor at a time), :mod:`~analysis.diff` (the checkpoint diff: ΔW
norms, densities, SVD / rank-1 metrics, LoRA adapters, MoE experts, alignment, clustering; its
:mod:`~analysis.diff.cli` is ``rlvr-diff [weights]`` and ``rlvr-diff hidden-states``, also
``python -m analysis``), :mod:`~analysis.hidden_states` (ρ̂⊥ by outcome, residual norms),
:mod:`~analysis.report` (Markdown / HTML / JSON reports).  ``analysis.weight_diff``,
``analysis.lora`` and ``analysis.diff_cli`` are deprecated aliases of :mod:`analysis.diff`.  File writers, the device resolver and the run block of every JSON
file live in the plumbing layer (:mod:`rlvr_plumbing.io`, :mod:`rlvr_plumbing.runtime`).  Submodules are imported on use
(``from analysis import spectra``) so that importing the package does not load torch.
"""
