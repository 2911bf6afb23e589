"""The wheel a user pip-installs: one distribution with the kernel package and the prebuilt labextension,
and never torch among its requirements (users bring their own CUDA build)."""

from __future__ import annotations

import json
import os
import zipfile
from pathlib import Path

import pytest

DIST = Path(__file__).resolve().parents[1] / "dist"
EXT = "jupyterlab_gpumem-{v}.data/data/share/jupyter/labextensions/jupyterlab-gpumem/"


def _wheel() -> Path:
    wheels = sorted(DIST.glob("jupyterlab_gpumem-*.whl"))
    if not wheels:
        if os.environ.get("GPUMEM_REQUIRE_WHEEL"):
            pytest.fail("no wheel in dist/: scripts/test.sh builds one with `pip wheel --no-deps -w dist .`")
        pytest.skip("no wheel built (scripts/test.sh builds one)")
    return wheels[-1]


def _names_and_metadata() -> tuple[set[str], str, str]:
    wheel = _wheel()
    version = wheel.name.split("-")[1]
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        metadata = zf.read(f"jupyterlab_gpumem-{version}.dist-info/METADATA").decode()
    return names, metadata, version


def test_the_wheel_ships_the_prebuilt_labextension_as_shared_data() -> None:
    names, _, version = _names_and_metadata()
    ext = EXT.format(v=version)
    assert ext + "package.json" in names
    assert ext + "install.json" in names
    assert any(n.startswith(ext + "static/remoteEntry.") for n in names)
    assert ext + "schemas/jupyterlab-gpumem/plugin.json" in names


def test_the_wheel_enables_its_jupyter_server_extension_on_install() -> None:
    wheel = _wheel()
    version = wheel.name.split("-")[1]
    config = f"jupyterlab_gpumem-{version}.data/data/etc/jupyter/jupyter_server_config.d/jupyterlab_gpumem.json"
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        enabled = json.loads(zf.read(config))["ServerApp"]["jpserver_extensions"]
    assert enabled == {"gpumem_kernel.server": True}
    for module in ("__init__", "machine", "kernels", "metrics", "handlers"):
        assert f"gpumem_kernel/server/{module}.py" in names


def test_the_wheel_ships_the_kernel_package_and_its_json_schemas() -> None:
    names, _, _ = _names_and_metadata()
    for module in (
        "__init__",
        "extension",
        "probe/prober",
        "probe/sampler",
        "channel/comm",
        "channel/frontend",
        "magics/gpumem",
        "clear/reclaim",
        "oom/checklist",
        "oom/classify",
        "analysis/pipeline/analyze",
        "autobatch/search",
        "benchmark/sweep",
    ):
        assert f"gpumem_kernel/{module}.py" in names
    assert "gpumem_kernel/oom/patterns.json" in names  # the OOM patterns the browser bundle was built from
    # `%gpumem watch`: anywidget serves the widget's front end from the package itself (no labextension)
    assert {"gpumem_kernel/watchwidget/static/watch.js", "gpumem_kernel/watchwidget/static/watch.css"} <= set(names)
    for schema in ("open", "request", "hello", "history", "sample", "reply", "error", "oom", "clear"):
        assert f"gpumem_kernel/wire/schemas/{schema}.schema.json" in names


def test_torch_is_not_a_requirement() -> None:
    _, metadata, _ = _names_and_metadata()
    requires = [line for line in metadata.splitlines() if line.startswith("Requires-Dist:")]
    runtime = [r for r in requires if "extra ==" not in r]
    assert runtime, "the runtime requirements are missing"
    assert not any(r.split()[1].lower().startswith("torch") for r in requires), requires
    names = {r.split()[1].split(">")[0].split("=")[0].split("<")[0].lower() for r in runtime}
    assert {"ipykernel", "nvidia-ml-py", "psutil", "pyyaml", "prometheus-client"} <= names


# The labextension's JavaScript, all chunks together: 243 KiB before the wire validators were generated and the
# YAML writer moved to the kernel, 191 KiB after, 223 KiB with the kernel lifecycle and the checklist's actions (all
# our own code), 256 KiB with the memory timeline, the idle list and the memory log's CSV (CSS minified at build).
# A budget, so that growth is a decision, not an accident; the list below catches a library.
BUNDLE_BUDGET = 320 * 1024

# What webpack may put into our chunks from node_modules: the CSS loaders and react-dom/client's entry (react-dom
# itself is JupyterLab's shared singleton). Ajv (~270 KB) or a YAML library would show up here first.
BUNDLED_THIRD_PARTY = {"css-loader", "style-loader", "react-dom"}


def test_the_labextension_bundle_stays_within_its_budget() -> None:
    wheel = _wheel()
    version = wheel.name.split("-")[1]
    static = EXT.format(v=version) + "static/"
    with zipfile.ZipFile(wheel) as zf:
        sizes = {
            i.filename: i.file_size
            for i in zf.infolist()
            if i.filename.startswith(static) and i.filename.endswith(".js")
        }
    assert sizes, "no JavaScript in the labextension"
    total = sum(sizes.values())
    assert total <= BUNDLE_BUDGET, f"{total / 1024:.1f} KiB > {BUNDLE_BUDGET / 1024:.0f} KiB: {sorted(sizes.items())}"


def test_the_labextension_bundles_no_library_of_its_own() -> None:
    wheel = _wheel()
    version = wheel.name.split("-")[1]
    with zipfile.ZipFile(wheel) as zf:
        licenses = json.loads(zf.read(EXT.format(v=version) + "static/third-party-licenses.json"))
    bundled = {p["name"] for p in licenses["packages"]}
    assert bundled <= BUNDLED_THIRD_PARTY, f"newly bundled: {sorted(bundled - BUNDLED_THIRD_PARTY)}"
