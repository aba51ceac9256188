"""The error-vs-budget study on every head of a real model (notebook 06): ``run`` computes it,
``experiments`` are its small live companions, ``findings`` reads the results.
"""

from pigviz.study import experiments, findings, run

__all__ = ["run", "experiments", "findings"]
