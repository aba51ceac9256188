"""Interactive compositions (ipywidgets + plotly FigureWidget) of the plot builders.

Widgets clamp what they are given and show problems in a status line: a callback never
raises into the notebook. ``base`` holds what every widget shares; each other module is one
topic's widgets."""

__all__ = ["base", "stick_balance", "key_geometry", "simhash", "budget", "study", "tokens", "toy_index"]
