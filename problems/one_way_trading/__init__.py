"""One-way trading: the problem (``problem.py``) and its modules."""
