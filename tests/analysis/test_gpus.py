"""The planning-target table: lookups by name, alias and NVML name; one-line errors; memory sizes."""

import pytest

from gpumem_kernel.analysis.gpus import lookup as gpus

GiB, MiB = 1 << 30, 1 << 20


@pytest.mark.parametrize(
    "name, expected",
    [
        ("RTX 4080 Super", "RTX 4080 Super"),
        ("rtx 4080 super", "RTX 4080 Super"),
        ("4080s", "RTX 4080 Super"),
        ("NVIDIA GeForce RTX 4080 SUPER", "RTX 4080 Super"),
        ("NVIDIA A100-SXM4-80GB", "A100 80GB"),
        ("A100 40GB", "A100 40GB"),
        ("Tesla T4", "T4"),
        ("NVIDIA H100 80GB HBM3", "H100 80GB"),
        ("NVIDIA GeForce RTX 4060 Ti", "RTX 4060 Ti 16GB"),
        ("h200", "H200"),
        ("NVIDIA L4", "L4"),
        ("NVIDIA GeForce RTX 5090", "RTX 5090"),
        ("5080", "RTX 5080"),
    ],
)
def test_lookup_by_name_alias_and_nvml_name(name: str, expected: str) -> None:
    assert gpus.lookup(name).name == expected


# (what a user types or NVML reports, the entry, its compute capability, nvidia-smi's total in MiB)
USERS_GPUS = [
    ("V100 16GB", "V100 16GB", "7.0", 16384),
    ("Tesla V100-SXM2-16GB", "V100 16GB", "7.0", 16384),
    ("V100-PCIE-32GB", "V100 32GB", "7.0", 32768),
    ("Tesla V100S-PCIE-32GB", "V100 32GB", "7.0", 32768),
    ("Tesla P100-PCIE-16GB", "P100 16GB", "6.0", 16280),
    ("P100 12GB", "P100 12GB", "6.0", 12288),
    ("1080 ti", "GTX 1080 Ti", "6.1", 11264),
    ("GTX 1080 Ti", "GTX 1080 Ti", "6.1", 11264),
    ("NVIDIA GeForce GTX 1080 Ti", "GTX 1080 Ti", "6.1", 11264),
    ("GeForce GTX 1060 6GB", "GTX 1060 6GB", "6.1", 6144),
    ("gtx 1050 ti", "GTX 1050 Ti", "6.1", 4096),
    ("1070", "GTX 1070", "6.1", 8192),
    ("NVIDIA GeForce RTX 2080 Ti", "RTX 2080 Ti", "7.5", 11264),
    ("2070 super", "RTX 2070 Super", "7.5", 8192),
    ("rtx 3070", "RTX 3070", "8.6", 8192),
    ("NVIDIA GeForce RTX 3070", "RTX 3070", "8.6", 8192),
    ("NVIDIA GeForce RTX 3080", "RTX 3080", "8.6", 10240),
    ("3060 ti", "RTX 3060 Ti", "8.6", 8192),
    ("NVIDIA GeForce RTX 4070 Ti SUPER", "RTX 4070 Ti Super", "8.9", 16384),
    ("NVIDIA GeForce RTX 4080", "RTX 4080", "8.9", 16376),
    ("NVIDIA GeForce RTX 5070", "RTX 5070", "12.0", 12227),
    ("rtx 5060 ti", "RTX 5060 Ti 16GB", "12.0", 16384),
    ("NVIDIA A10", "A10", "8.6", 23028),
    ("NVIDIA A30", "A30", "8.0", 24576),
    ("NVIDIA A40", "A40", "8.6", 46068),
    ("a6000", "RTX A6000", "8.6", 49140),
    ("NVIDIA RTX A6000", "RTX A6000", "8.6", 49140),
    ("l40s", "L40S", "8.9", 46068),
    ("NVIDIA L40S", "L40S", "8.9", 46068),
    ("NVIDIA A100-PCIE-40GB", "A100 40GB", "8.0", 40960),
    ("NVIDIA H100 80GB HBM3", "H100 80GB", "9.0", 81559),
    ("NVIDIA H200", "H200", "9.0", 143771),
    ("b200", "B200", "10.0", 183359),
    ("NVIDIA B200", "B200", "10.0", 183359),
]


@pytest.mark.parametrize("name, expected, cc, mib", USERS_GPUS)
def test_the_gpus_users_have_look_up_with_compute_capability_and_memory(name, expected, cc, mib) -> None:
    spec = gpus.lookup(name)
    assert (spec.name, spec.compute_capability, spec.memory_bytes) == (expected, cc, mib * MiB)
    assert spec.bf16 == (float(cc) >= 8.0)


def test_every_entry_and_alias_looks_up_to_itself() -> None:
    for spec in gpus.GPUS:
        for name in (spec.name,) + spec.aliases:
            assert gpus.lookup(name) is spec, name
    assert len(gpus.GPUS) >= 50 and len({spec.name for spec in gpus.GPUS}) == len(gpus.GPUS)


@pytest.mark.parametrize(
    "name, choices",
    [("V100", "'V100 16GB' or 'V100 32GB'"), ("a100", "'A100 40GB' or 'A100 80GB'"), ("P100", "'P100 16GB'")],
)
def test_family_names_sold_in_several_sizes_ask_which(name: str, choices: str) -> None:
    with pytest.raises(ValueError, match=f"ambiguous GPU '{name}': say {choices}"):
        gpus.lookup(name)


def test_table_covers_the_seeds_gpus_with_memory_and_bf16() -> None:
    expected_gib = {
        "RTX 2060": 6,
        "RTX 3060": 12,
        "RTX 4060 Ti 16GB": 16,
        "RTX 4080 Super": 16,
        "RTX 3090": 24,
        "RTX 4090": 24,
        "RTX 5080": 16,
        "RTX 5090": 32,
        "A100 40GB": 40,
        "A100 80GB": 80,
        "T4": 15,
        "L4": 22,
        "A10": 22,
        "H100 80GB": 80,
        "H200": 140,
    }
    for name, gib in expected_gib.items():
        spec = gpus.lookup(name)
        assert round(spec.memory_bytes / GiB) == gib, name
    assert not gpus.lookup("RTX 2060").bf16 and not gpus.lookup("T4").bf16
    assert gpus.lookup("RTX 3090").bf16 and gpus.lookup("H100").bf16


@pytest.mark.parametrize("name", ["RTX 9999", "A100", "V100", "", "potato", "V100 24GB"])
def test_unknown_or_ambiguous_names_give_one_line(name: str) -> None:
    with pytest.raises(ValueError) as info:
        gpus.lookup(name)
    assert "\n" not in str(info.value)


def test_unknown_name_lists_close_names() -> None:
    with pytest.raises(ValueError, match="RTX 4080 Super"):
        gpus.lookup("RTX 4080 Supr")
    with pytest.raises(ValueError, match=r"unknown GPU 'RTX 3075'; close names: .*RTX 3070"):
        gpus.lookup("RTX 3075")
    with pytest.raises(ValueError, match=r"unknown GPU 'GTX 1080 Tie'; close names: .*GTX 1080 Ti"):
        gpus.lookup("GTX 1080 Tie")


def test_parse_memory() -> None:
    assert gpus.parse_memory("16GiB") == 16 * GiB
    assert gpus.parse_memory("16 GB") == 16 * 10**9
    assert gpus.parse_memory("512MiB") == 512 * MiB
    assert gpus.parse_memory(1234) == 1234
    for bad in ("lots", "-1GiB", "0", True):
        with pytest.raises(ValueError):
            gpus.parse_memory(bad)


# (compute capability, torch, environment) -> (cuBLAS, cuBLASLt kept, cuBLASLt per call): what each torch's
# libtorch_cuda does, read from the binaries of 2.8.0, 2.9.1, 2.10.0, 2.11.0, 2.12.0, 2.13.0 and 2.14.1
BLAS_CASES = [
    ("8.0", "2.8.0+cu128", {}, (8_519_680, 0, MiB)),  # ':4096:2:16:8'; Lt allocated around each addmm
    ("8.6", "2.10.0+cu128", {}, (8_519_680, MiB, 0)),  # Lt keeps its own 1 MiB per thread
    ("9.0", "2.11.0+cu130", {}, (32 * MiB, MiB, 0)),  # Hopper: 32 MiB
    ("12.0", "2.11.0+cu130", {}, (8_519_680, MiB, 0)),  # Blackwell consumer cards: not yet
    ("12.0", "2.12.0", {}, (32 * MiB, 0, 0)),  # 32 MiB on majors 9, 10, 12; Lt shares the cuBLAS workspace
    ("11.0", "2.13.0", {}, (8_519_680, 0, 0)),
    ("11.0", "2.14.1+cu130", {}, (32 * MiB, 0, 0)),  # majors 9 to 12
    ("8.9", None, {}, (8_519_680, 0, 0)),  # unknown torch: the newest rules
    ("8.6", "2.13.0", {"CUBLAS_WORKSPACE_CONFIG": ":4096:8"}, (32 * MiB, 0, 0)),
    ("8.6", "2.11.0", {"TORCH_CUBLASLT_UNIFIED_WORKSPACE": "1"}, (8_519_680, 0, 0)),
    ("8.6", "2.13.0", {"TORCH_CUBLASLT_UNIFIED_WORKSPACE": "0"}, (8_519_680, MiB, 0)),
    ("8.6", "2.11.0", {"CUBLASLT_WORKSPACE_SIZE": "65536"}, (8_519_680, 8_519_680, 0)),  # capped at cuBLAS's
    (
        "8.6",
        "2.11.0",
        {"CUBLASLT_WORKSPACE_SIZE": "65536", "TORCH_CUBLASLT_UNIFIED_WORKSPACE": "0"},
        (8_519_680, 64 * MiB, 0),
    ),
    ("8.6", "2.8.0", {"CUBLASLT_WORKSPACE_SIZE": "4096"}, (8_519_680, 0, 4 * MiB)),
]


@pytest.mark.parametrize("cc, torch_version, env, expected", BLAS_CASES)
def test_blas_workspaces_follow_the_torch_the_user_runs(cc, torch_version, env, expected) -> None:
    got = gpus.blas_workspaces(cc, torch_version, env)
    assert (got.cublas, got.lt, got.lt_per_call) == expected
    assert got.plan_fields() == dict(zip(("cublas_bytes", "cublaslt_bytes", "cublaslt_call_bytes"), expected))


def test_blas_workspaces_read_the_process_environment_by_default(monkeypatch) -> None:
    monkeypatch.setenv("CUBLAS_WORKSPACE_CONFIG", ":16:8")
    assert gpus.blas_workspaces("9.0", "2.11.0").cublas == 16 * 1024 * 8


def test_context_grows_with_the_generation() -> None:
    assert gpus.context_estimate("9.0") > gpus.context_estimate("7.5") > 0
