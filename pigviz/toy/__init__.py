"""The stick-balance toy (notebook 01): attention as the balance point of weighted sticks."""

from pigviz.toy import stick_balance

__all__ = ["stick_balance"]
