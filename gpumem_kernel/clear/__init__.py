"""Clear GPU memory: find what holds CUDA tensors in the user's namespace, tracebacks and output cache, drop what the
user allowed, empty the cache, report.
"""
