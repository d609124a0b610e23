"""simulations: data generators that test the theory.

:mod:`~simulations.categorical` (the batched K-action softmax policy of F-GRPO App. J, exact
group sampling, presets ``fgrpo-fig4`` / ``fgrpo-fig4-small``), :mod:`~simulations.toys` (the
few-action toys of the Two-Stage paper and the behaviour-space cases of A-GRAE Theorem 1, on the same engine),
:mod:`~simulations.linear_head` (the contextual softmax head: the Over-Sharpening toy and a prompt
population whose ΔW is FADE App. 15's output-head update) and :mod:`~simulations.grpo` (a small
GRPO trainer on Hugging Face causal LMs).  Command lines: ``rlvr-sim``, ``rlvr-train``.
"""
