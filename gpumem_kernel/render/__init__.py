"""Shared text and HTML rendering: the one byte formatter (units), bounded one-line messages (text), the status
snapshot's console and HTML layouts (status), and what the user copies or inserts (snippets: YAML, loops)."""
