"""torchrun script of the TRL tests: ``torchrun --nproc_per_node 2 trl_dist.py SPEC.json``.

SPEC.json holds ``{"runs": [{"name": ..., "out": DIR, "reward": ..., "cfg": {...},
"trainer": {...}}]}``; every run trains the adapter's GRPOTrainer on CPU (gloo) and each rank
writes ``DIR/rank{R}.json`` (:func:`tests.integrations.trl_tiny.to_jsonable`).
"""

from __future__ import annotations

import json
import os
import sys


def main(spec_path: str) -> None:
    # imported here: pytest imports this file for doctests also where trl is not installed
    import torch

    from integrations.trl import GRPOTrainer
    from tests.integrations import trl_tiny

    torch.set_num_threads(1)
    with open(spec_path) as f:
        spec = json.load(f)
    for run in spec["runs"]:
        trainer = trl_tiny.build(GRPOTrainer, run["out"], reward=run.get("reward", "binary"),
                                 cfg=run.get("cfg"), **run.get("trainer", {}))
        trainer.train(resume_from_checkpoint=run.get("resume_from"))
        rank = trainer.accelerator.process_index
        with open(os.path.join(run["out"], f"rank{rank}.json"), "w") as f:
            json.dump(trl_tiny.to_jsonable(trainer), f)
        trainer.accelerator.wait_for_everyone()


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    main(sys.argv[1])
