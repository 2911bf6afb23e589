"""Shared text and HTML rendering: byte units and the status snapshot's console and HTML layouts."""
