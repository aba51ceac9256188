"""Interactive compositions (ipywidgets + plotly FigureWidget) of the plot builders.

Widgets clamp what they are given and show problems in a status line: a callback never
raises into the notebook."""
