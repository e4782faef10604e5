"""Budgeted allocation (AdWords with small bids): the problem (``problem.py``) and its modules."""
