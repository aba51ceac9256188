"""The error-vs-budget study on every head of a real model (lessons 06a-06b, findings 1-2): ``run`` computes it,
``experiments`` are its small live companions, ``findings`` reads the results, ``estimators``
runs an estimator of your own beside the library's (notebook 08).
"""

from pigviz.study import estimators, experiments, findings, run

__all__ = ["run", "experiments", "findings", "estimators"]
