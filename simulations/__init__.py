"""simulations: data generators that test the theory.

Today: :mod:`~simulations.categorical` (the batched K-action softmax policy of F-GRPO
App. J, exact group sampling, presets ``fgrpo-fig4`` / ``fgrpo-fig4-small``) and
:mod:`~simulations.linear_head` (the contextual softmax head: the 004 toy and a prompt
population whose ΔW is FADE App. 15's output-head update).  Command line: ``rlvr-sim``.
The few-action toys of 001 and the GRPO trainer come with later issues.
"""
