"""Strict numerics for every test: no silent rank promotion."""

import jax

jax.config.update("jax_numpy_rank_promotion", "raise")
