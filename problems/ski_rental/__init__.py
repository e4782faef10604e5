"""Ski rental: rent for 1 a day or buy once, for a season of unknown length."""
