"""The kernel end of the browser's connection: the `gpumem` comm (thread-safe requests) and the main-thread entry
points the browser calls by silent execute.
"""
