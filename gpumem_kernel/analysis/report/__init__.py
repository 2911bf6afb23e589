"""The analysis report: its dataclasses and JSON payload, the batch picks it recommends, and its text and HTML
rendering."""
