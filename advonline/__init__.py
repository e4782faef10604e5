"""advonline: learn online algorithms by adversarial training and measure them honestly."""

__version__ = "0.1.0"
