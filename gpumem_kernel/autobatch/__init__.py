"""Which batch sizes fit: the search for the maximum batch size, with recovery from (simulated or real) out-of-memory
errors.
"""
