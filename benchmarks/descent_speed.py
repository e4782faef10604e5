"""Seconds per step of certificate descent (an exact DP certificate of the table, then the
gradient through the DP at its worst strategy), for each class certificate_descent.py trains.

Run: python benchmarks/descent_speed.py [--config experiments/configs/k1-u100-oracle.toml]
         [--steps 20]

For each class it runs a descent of ``--steps`` steps and prints the seconds from the second
step's certificate to the last one's over the steps between (the first step compiles the
programmes), the seconds to the first certificate (compiling included) and the certificate
the run reached. The certificate is float64 on every device, so a GPU and a CPU reach the
same figure up to the order of their sums. The first line names the device.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

import jax

from advonline import configs
from advonline.problems.posted_price.descent import descend

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "experiments"))
from certificate_descent import CLASSES  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="experiments/configs/k1-u100-oracle.toml")
    parser.add_argument("--steps", type=int, default=20, help="steps of the timed descent")
    args = parser.parse_args()
    if args.steps < 3:
        parser.error("--steps must be at least 3")
    setting = configs.load(args.config).setting
    device = jax.devices()[0]
    print(f"device: {device.platform} ({device.device_kind}); setting: {setting.describe()}")
    for name, config in CLASSES.items():
        found = descend(setting, dataclasses.replace(config, steps=args.steps), jax.random.key(0))
        times = found.reached_at
        print(
            f"{name:24} {(times[-1] - times[1]) / (len(times) - 2):7.3f} s per step (first "
            f"certificate after {times[0]:.1f} s); certificate after {args.steps} steps "
            f"{found.certificate.ratio:.6f}",
            flush=True,
        )


if __name__ == "__main__":
    main()
