"""Memory accounting under every trace: the caching-allocator model, the storage tracker, and the Ctrl-C guard the
tracker raises interrupts through."""
