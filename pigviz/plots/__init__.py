"""Plotly figure builders: data in, ``go.Figure`` out. No widgets, no state."""
