"""CUDA out of memory: recognise the error, parse its figures, and build the checklist shown after the traceback."""
