"""docs/monitoring/: the scrape config, the alerts and the Grafana dashboard parse, and every gpumem_ metric they
name is one the collector exports."""

from __future__ import annotations

import json
import re
from pathlib import Path

import yaml

from gpumem_kernel.server.metrics import GpuMemCollector

DOCS = Path(__file__).resolve().parents[2] / "docs" / "monitoring"
EXPORTED = {family.name for family in GpuMemCollector(lambda: None, lambda: 0.0).describe()}


def named(text: str) -> set:
    return set(re.findall(r"\bgpumem_[a-z_]+", text)) - {"gpumem_kernel"}  # the package's name in prose


def test_every_metric_the_docs_and_dashboards_name_is_exported():
    for name in ("prometheus.yml", "gpumem-alerts.yml", "grafana-dashboard.json", "README.md"):
        text = (DOCS / name).read_text("utf-8")
        assert named(text) <= EXPORTED, (name, named(text) - EXPORTED)
    readme = (DOCS / "README.md").read_text("utf-8")
    assert EXPORTED <= named(readme), EXPORTED - named(readme)  # the table documents every metric


def test_the_configs_parse_and_the_dashboard_shows_servers_kernels_and_idle_holders():
    scrape = yaml.safe_load((DOCS / "prometheus.yml").read_text("utf-8"))
    job = scrape["scrape_configs"][0]
    assert job["metrics_path"] == "/metrics" and job["authorization"]["type"] == "Bearer"
    rules = yaml.safe_load((DOCS / "gpumem-alerts.yml").read_text("utf-8"))["groups"][0]["rules"]
    assert any("gpumem_idle_gpu_holders" in rule["expr"] for rule in rules)
    dashboard = json.loads((DOCS / "grafana-dashboard.json").read_text("utf-8"))
    queries = {p["title"]: " ".join(t["expr"] for t in p["targets"]) for p in dashboard["panels"]}
    assert "gpumem_gpu_memory_used_bytes" in queries["GPU memory used per server"]
    assert "gpumem_kernel_gpu_memory_bytes" in queries["GPU memory per kernel"]
    idle = next(q for title, q in queries.items() if title.startswith("Idle GPU holders ("))
    assert "gpumem_kernel_idle_seconds" in idle and "gpumem_kernel_gpu_memory_bytes" in idle
