"""Growth: which cell keeps growing this kernel's memory, and how fast a running cell grows it.

After each cell where device memory is in use (the holders' switch, heldby.collect.cuda_in_use), the hook
(growth.hook) records this kernel's allocated and reserved bytes per device before and after the cell; when
re-running the same cell leaves allocated higher by a consistent step (growth.reruns), the cell's output and the
panel get one notice per run, with the holders that grew between runs and the fix for the pattern found
(growth.rules). The kernel's resident memory (RSS) is read around every cell too, under the device "host": a cell
whose re-runs keep growing it (arrays appended to a global list) gets the same notice, in RSS. While a cell runs,
the sampler's samples give the in-cell trend (growth.trend). Parts: memory (the readings), reruns (per-cell steps),
rules (one classifier per pattern), trend, report (the wire dataclasses and the text/HTML line), hook.
"""
