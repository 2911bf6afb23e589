"""The wire format: the JSON Schemas of every comm message and output payload (schemas/), and the Python side of them."""
