"""Online problems: each a module of pure JAX functions over immutable pytrees."""

from problems import posted_price

#: Problems by their CLI name.
PROBLEMS = {"posted-price": posted_price}
