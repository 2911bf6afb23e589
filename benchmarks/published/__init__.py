"""Predicted vs published GPU memory of training runs whose settings were published (issue 24, deliverable 6)."""
