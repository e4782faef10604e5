"""Online posted-price allocation: the problem (``problem.py``) and its modules."""
