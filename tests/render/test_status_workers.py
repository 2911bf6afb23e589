"""`%gpumem status`'s Workers row: unique memory (USS) first, RSS for reference, the USS growth per minute."""

from __future__ import annotations

import dataclasses

from gpumem_kernel.probe.host import HostReader
from gpumem_kernel.render.status import render_text, workers_text

GiB = 1024**3
MiB = 1024**2


def test_unique_memory_leads_and_rss_is_kept_for_reference():
    children = {"count": 4, "rss": 5 * GiB, "uss": GiB + GiB // 5, "pss": 2 * GiB, "uss_growth_per_min": 40 * MiB}
    assert workers_text(children) == "4 child processes, 1.20 GiB unique (RSS 5.00 GiB), +40.00 MiB/min"


def test_small_or_unknown_growth_is_left_out_and_a_shrink_has_a_minus():
    one = {"count": 1, "rss": 512 * MiB, "uss": 64 * MiB, "pss": None, "uss_growth_per_min": 1000}
    assert workers_text(one) == "1 child process, 64.00 MiB unique (RSS 512.00 MiB)"
    assert workers_text({**one, "uss_growth_per_min": None}) == "1 child process, 64.00 MiB unique (RSS 512.00 MiB)"
    assert workers_text({**one, "uss_growth_per_min": -8 * MiB}).endswith(", -8.00 MiB/min")


def test_not_measurable_and_older_kernels():
    assert workers_text({"count": 2, "rss": GiB, "uss": None, "pss": None, "uss_growth_per_min": None}) == (
        "2 child processes, 1.00 GiB RSS, unique memory not measurable"
    )
    assert workers_text({"count": 2, "rss": GiB}) == "2 child processes, 1.00 GiB"  # a sample from before USS
    assert workers_text({"count": 0, "rss": 0, "uss": None}) == "0 child processes, 0.00 MiB"


def test_the_status_text_has_the_workers_row_of_a_real_host_reading():
    host = dataclasses.asdict(HostReader().read())
    host["children"] = {"count": 2, "rss": 3 * GiB, "uss": GiB, "pss": None, "uss_growth_per_min": 2 * MiB}
    sample = {"gpu": {"available": False, "reason": "test", "devices": []}, "host": host}
    text = render_text(sample)
    assert "2 child processes, 1.00 GiB unique (RSS 3.00 GiB), +2.00 MiB/min" in text
