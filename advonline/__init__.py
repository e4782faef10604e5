"""advonline: learn online algorithms by adversarial training and measure them honestly."""

from advonline.xla_cpu import prefer_older_emitters

__version__ = "0.1.0"

prefer_older_emitters()  # before JAX's CPU backend starts (advonline/xla_cpu.py)
