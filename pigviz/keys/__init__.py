"""Experiments on a real model's keys (notebooks 02-04): their geometry (cone, sink,
centring), how often they hash into the query's bucket, and 2-D projections.
"""

from pigviz.keys import geometry, hashing, projection

__all__ = ["geometry", "hashing", "projection"]
