"""Which batch size runs fastest: the timed sweep with I/O, forward, backward and optimizer times."""
