"""Record tests/data/models/bf16_envelope.json: each golden's simulated bf16 errors (tests/unit/models/roundoff.py).

    python tests/tools/record_bf16_envelope.py [--draws 64] [--output tests/data/models/bf16_envelope.json]

For every golden of test_upstream_parity.py, DRAWS float64 forwards with bf16's rounding simulated (draw d seeded
with d): the relative error of the logits and of q_halt against the golden at each evaluation step, for every draw.
test_bf16.py bounds the real bf16 forward by the largest and smallest of them; it recomputes a few draws to check
that this file still matches the code. Takes about a minute on one core; the result does not depend on the CPU
(float64 throughout, except the fp32 and bf16 parts that the bf16 path keeps too).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests/unit/models"))
import roundoff  # noqa: E402

GOLDENS = ["trm", "trm_mlpt", "trm_learned", "hrm", "urm", "urm_conv_forward", "transformer"]


def record(draws: int) -> dict:
    variants = {}
    for variant in GOLDENS:
        golden = torch.load(ROOT / f"tests/data/models/golden_{variant}.pt", weights_only=True)
        per_draw = [roundoff.draw(golden, seed) for seed in range(draws)]  # [draw][step] -> (logits, q_halt)
        steps = len(per_draw[0])
        variants[variant] = {
            key: [[float(f"{per_draw[d][s][k]:.6g}") for d in range(draws)] for s in range(steps)]
            for k, key in enumerate(("logits", "q_halt"))
        }
        print(f"{variant}: {draws} draws x {steps} steps", file=sys.stderr)
    return {"unit_roundoff": roundoff.U, "draws": draws, "seeds": "draw d uses seed d", "variants": variants}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--draws", type=int, default=64)
    parser.add_argument("--output", type=Path, default=ROOT / "tests/data/models/bf16_envelope.json")
    args = parser.parse_args()
    torch.set_num_threads(1)
    data = record(args.draws)
    tmp = args.output.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, separators=(",", ":")) + "\n")
    tmp.replace(args.output)
    print(f"wrote {args.output}", file=sys.stderr)


if __name__ == "__main__":
    main()
