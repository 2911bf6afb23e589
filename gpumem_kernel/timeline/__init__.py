"""The memory timeline: what was alive over one recorded cell or one predicted training step, and which line
allocated it (payload application/vnd.gpumem.timeline.v1+json, wire/schemas/timeline.schema.json).

history.py is the one in-memory form both sources produce (a recorded CUDA allocator history, a traced step);
everything after it (payload, downsampling, alive-at-peak, exports) works on a History only.
"""
