"""Time the exact certificate of `threshold` on the README's default setting, on one CPU core.

Run: python benchmarks/certify_speed.py   (target: under 2 s)
Prints the first call (JIT compilation included) and the best of five warm calls. Where JAX
sees a GPU the programme runs there (the host side on one CPU core), and the line says so.
"""

import os

os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})  # one core, before JAX starts
os.environ["XLA_FLAGS"] = "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"

import time  # noqa: E402

import jax  # noqa: E402

from advonline.baselines.posted_price import make_baseline  # noqa: E402
from advonline.problems.posted_price.certify import certify_dp, dp_work  # noqa: E402
from advonline.problems.posted_price.model import Setting  # noqa: E402


def main() -> None:
    setting = Setting()  # the CLI's default setting
    policy = make_baseline("threshold", setting)
    start = time.perf_counter()
    certificate = certify_dp(setting, policy)
    cold = time.perf_counter() - start
    warm = []
    for _ in range(5):
        start = time.perf_counter()
        certify_dp(setting, policy)
        warm.append(time.perf_counter() - start)
    print(f"setting: {setting.describe()}")
    print(
        f"threshold exact CR {certificate.ratio:.6f} ({certificate.note}); "
        f"DP work {dp_work(setting):.2e} updates per sweep"
    )
    device = jax.devices()[0]
    where = "one CPU core" if device.platform == "cpu" else f"{device.device_kind}, one CPU core"
    print(
        f"{where}: first call {cold:.2f} s (compilation included), "
        f"warm best {min(warm):.3f} s "
        f"[target < 2 s: {'met' if cold < 2 else 'NOT met'}]"
    )


if __name__ == "__main__":
    main()
