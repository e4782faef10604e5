"""Rent or buy's policy file reader (tests/rent_or_buy.py), in a module of its own so that a
service reads the file with NumPy alone, without importing JAX."""

import numpy as np


def load(document: dict):
    return document["setting"], np.asarray(document["bought"])
