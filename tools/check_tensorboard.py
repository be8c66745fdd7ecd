"""TensorBoard's own reader on a loom run directory.

usage: .venv/bin/python tools/check_tensorboard.py RUN_DIR

Loads RUN_DIR with TensorBoard's EventAccumulator (the code behind
`tensorboard --logdir`), and checks its scalars against the run's
metrics.jsonl: every step's training loss, learning rate and tokens/s, and
the validation losses, equal as float32. Exit 0 and an "ok:" line, else 1.
"""
import json
import math
import sys

import numpy as np
from tensorboard.backend.event_processing import event_accumulator


def main(run_dir):
    acc = event_accumulator.EventAccumulator(run_dir, size_guidance={event_accumulator.SCALARS: 0})
    acc.Reload()
    tags = acc.Tags()["scalars"]
    steps = {}
    with open(f"{run_dir}/metrics.jsonl") as f:
        for line in f:
            row = json.loads(line)
            if "step" in row:
                steps[row["step"]] = row
    problems = []
    for tag, key in [("loss/train", "loss"), ("optim/lr", "lr"), ("perf/tokens_per_s", "tokens_per_s"),
                     ("loss/val", "val_loss")]:
        want = {s: r[key] for s, r in steps.items() if r.get(key) is not None and math.isfinite(r[key])}
        if not want:
            continue
        if tag not in tags:
            problems.append(f"{tag}: missing (tags: {sorted(tags)})")
            continue
        got = {e.step: e.value for e in acc.Scalars(tag)}
        for s, v in want.items():
            if s not in got:
                problems.append(f"{tag}: step {s} missing")
            elif np.float32(got[s]) != np.float32(v):
                problems.append(f"{tag}: step {s}: {got[s]} in TensorBoard, {v} in metrics.jsonl")
    if problems:
        print("\n".join(problems))
        return 1
    print(f"ok: tensorboard read {len(tags)} scalar tags over {len(steps)} steps of {run_dir}, "
          f"equal to metrics.jsonl")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
