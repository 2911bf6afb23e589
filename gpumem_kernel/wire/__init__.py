"""The wire format: the JSON Schemas of every comm message and output payload (schemas/), and their Python side."""
