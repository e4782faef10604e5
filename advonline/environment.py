"""What a figure was measured with: the versions of the numerical stack and the device.

Recorded in every report (``evaluation.json``, ``advonline evaluate --json``) and in a run
folder's marker, so a figure can be traced to the install and the machine that produced it.
"""

from __future__ import annotations

import os
import platform
from importlib import metadata

import jax

from advonline import __version__

#: The distributions whose versions can change a figure.
PACKAGES = ("jax", "jaxlib", "flax", "optax", "numpy", "scipy")


def _version(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def describe() -> dict:
    """JSON-ready: advonline's, Python's and each of :data:`PACKAGES`' versions, the devices
    JAX computes on (platform, kind, count), and ``XLA_FLAGS`` (how XLA generated the code:
    advonline/xla_cpu.py; a flag can change a figure's rounding)."""
    devices = jax.devices()
    return {
        "advonline": __version__,
        "python": platform.python_version(),
        **{package: _version(package) for package in PACKAGES},
        "device": {
            "platform": devices[0].platform,
            "kind": devices[0].device_kind,
            "count": len(devices),
        },
        "machine": platform.machine(),
        "xla_flags": os.environ.get("XLA_FLAGS", ""),
    }


def device_line() -> str:
    """One line naming the device, the host's cores and jax's version, for benchmarks to
    print before their figures."""
    described = describe()
    device = described["device"]
    return (
        f"device: {device['count']} x {device['kind']} ({device['platform']}); "
        f"{os.cpu_count()} CPU cores; jax {described['jax']}"
    )
