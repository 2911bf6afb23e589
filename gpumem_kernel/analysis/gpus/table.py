"""The GPUs users plan for: memory, compute capability and the names they type or NVML reports.

Memory basis, per row: `_smi` is the total nvidia-smi (NVML) reports for the card in MiB, as published in
nvidia-smi output of recent drivers (older drivers report a few hundred MiB less on data-center parts); `_gb` is
only the marketing size, GB x 1024 MiB, where no nvidia-smi figure was at hand, so it may be slightly high.
Compute capabilities are NVIDIA's (CUDA GPUs table); bf16 needs 8.0 or newer.

Sizes sold under one name: where NVML's name carries the size (A100-SXM4-80GB, V100-PCIE-32GB, GTX 1060 6GB),
the bare family name is ambiguous and `gpus.lookup` asks (`AMBIGUOUS`); where it does not (GeForce RTX 3080,
RTX 4060 Ti), the bare name is the common variant, named as the default in the row's name or comment.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Dict, Tuple

MiB = 1 << 20


@dataclass(frozen=True)
class GpuSpec:
    name: str
    memory_bytes: int
    compute_capability: str
    bf16: bool
    aliases: Tuple[str, ...] = ()

    def to_dict(self) -> Dict[str, object]:
        data = asdict(self)
        data["aliases"] = list(self.aliases)
        return data


def _spec(name: str, mib: int, cc: str, aliases: Tuple[str, ...] = ()) -> GpuSpec:
    major = int(cc.split(".")[0])
    return GpuSpec(name=name, memory_bytes=mib * MiB, compute_capability=cc, bf16=major >= 8, aliases=aliases)


def _smi(name: str, mib: int, cc: str, *aliases: str) -> GpuSpec:
    """A row whose memory is nvidia-smi's total (MiB)."""
    return _spec(name, mib, cc, aliases)


def _gb(name: str, gb: int, cc: str, *aliases: str) -> GpuSpec:
    """A row whose memory is only the marketing size: GB x 1024 MiB."""
    return _spec(name, gb * 1024, cc, aliases)


GPUS: Tuple[GpuSpec, ...] = (
    # Pascal: GeForce GTX 10 (6.1), Tesla P100 (6.0)
    _gb("GTX 1050", 2, "6.1", "1050"),
    _gb("GTX 1050 Ti", 4, "6.1", "1050 ti", "1050ti"),
    _gb("GTX 1060 3GB", 3, "6.1", "1060 3gb"),
    _gb("GTX 1060 6GB", 6, "6.1", "1060 6gb"),
    _gb("GTX 1070", 8, "6.1", "1070"),
    _gb("GTX 1070 Ti", 8, "6.1", "1070 ti", "1070ti"),
    _gb("GTX 1080", 8, "6.1", "1080"),
    _smi("GTX 1080 Ti", 11264, "6.1", "1080 ti", "1080ti", "gtx 1080ti"),
    _gb("P100 12GB", 12, "6.0", "p100-pcie-12gb", "p100 12g"),
    _smi("P100 16GB", 16280, "6.0", "p100-pcie-16gb", "p100-sxm2-16gb", "p100 16g"),
    # Volta: V100 (7.0); the 32 GB V100S too
    _smi("V100 16GB", 16384, "7.0", "v100-sxm2-16gb", "v100-pcie-16gb", "v100-fhhl-16gb", "v100 16g"),
    _smi("V100 32GB", 32768, "7.0", "v100-sxm2-32gb", "v100-pcie-32gb", "v100s", "v100s-pcie-32gb", "v100 32g"),
    # Turing: RTX 20, T4 (7.5)
    _smi("RTX 2060", 6144, "7.5", "rtx 2060 6gb", "2060"),
    _gb("RTX 2060 Super", 8, "7.5", "2060 super", "2060s"),
    _gb("RTX 2070", 8, "7.5", "2070"),
    _gb("RTX 2070 Super", 8, "7.5", "2070 super", "2070s"),
    _gb("RTX 2080", 8, "7.5", "2080"),
    _gb("RTX 2080 Super", 8, "7.5", "2080 super", "2080s"),
    _smi("RTX 2080 Ti", 11264, "7.5", "2080 ti", "2080ti"),
    _smi("T4", 15360, "7.5", "tesla t4", "t4 16gb"),
    # Ampere: RTX 30, A10, A40, RTX A6000 (8.6); A30, A100 (8.0)
    _gb("RTX 3050", 8, "8.6", "3050"),
    _smi("RTX 3060", 12288, "8.6", "rtx 3060 12gb", "3060"),
    _gb("RTX 3060 Ti", 8, "8.6", "3060 ti", "3060ti"),
    _smi("RTX 3070", 8192, "8.6", "3070"),
    _gb("RTX 3070 Ti", 8, "8.6", "3070 ti", "3070ti"),
    _smi("RTX 3080", 10240, "8.6", "3080", "rtx 3080 10gb"),  # NVML names both sizes alike: 10 GB, the common one
    _gb("RTX 3080 12GB", 12, "8.6", "3080 12gb"),
    _gb("RTX 3080 Ti", 12, "8.6", "3080 ti", "3080ti"),
    _smi("RTX 3090", 24576, "8.6", "rtx 3090 24gb", "3090"),
    _gb("RTX 3090 Ti", 24, "8.6", "3090 ti", "3090ti"),
    _smi("A10", 23028, "8.6", "a10 24gb", "a10g"),
    _gb("A30", 24, "8.0", "a30 24gb"),
    _smi("A40", 46068, "8.6", "a40 48gb"),
    _smi("RTX A6000", 49140, "8.6", "a6000", "a6000 48gb"),
    _smi("A100 40GB", 40960, "8.0", "a100-sxm4-40gb", "a100-pcie-40gb", "a100 40g"),
    _smi("A100 80GB", 81920, "8.0", "a100-sxm4-80gb", "a100-pcie-80gb", "a100 80gb pcie", "a100 80g"),
    # Ada: RTX 40, L4, L40, L40S (8.9)
    _gb("RTX 4060", 8, "8.9", "4060"),
    _gb("RTX 4060 Ti 8GB", 8, "8.9", "4060 ti 8gb"),
    # NVML names both 4060 Ti sizes alike: the bare name is the 16 GB one (the one bought for training)
    _smi("RTX 4060 Ti 16GB", 16380, "8.9", "rtx 4060 ti", "4060 ti", "4060ti", "4060 ti 16gb"),
    _gb("RTX 4070", 12, "8.9", "4070"),
    _gb("RTX 4070 Super", 12, "8.9", "4070 super", "4070s"),
    _gb("RTX 4070 Ti", 12, "8.9", "4070 ti", "4070ti"),
    _gb("RTX 4070 Ti Super", 16, "8.9", "4070 ti super", "4070tis"),
    _smi("RTX 4080", 16376, "8.9", "4080"),
    _smi("RTX 4080 Super", 16376, "8.9", "rtx 4080 super", "4080 super", "4080s", "rtx 4080s"),
    _smi("RTX 4090", 24564, "8.9", "rtx 4090 24gb", "4090"),
    _smi("L4", 23034, "8.9", "l4 24gb"),
    _smi("L40", 46068, "8.9", "l40 48gb"),
    _smi("L40S", 46068, "8.9", "l40s 48gb"),
    # Hopper (9.0), Blackwell data center (10.0) and GeForce RTX 50 (12.0)
    _smi("H100 80GB", 81559, "9.0", "h100", "h100 sxm", "h100 80gb hbm3", "h100 pcie", "h100-sxm5-80gb"),
    _smi("H200", 143771, "9.0", "h200 141gb", "h200 sxm", "h200 nvl"),
    _smi("B200", 183359, "10.0", "b200 180gb", "b200 sxm", "b200 192gb"),
    _gb("RTX 5060", 8, "12.0", "5060"),
    _gb("RTX 5060 Ti 8GB", 8, "12.0", "5060 ti 8gb"),
    # as for the 4060 Ti, the bare name is the 16 GB one
    _gb("RTX 5060 Ti 16GB", 16, "12.0", "rtx 5060 ti", "5060 ti", "5060ti", "5060 ti 16gb"),
    _smi("RTX 5070", 12227, "12.0", "5070"),
    _gb("RTX 5070 Ti", 16, "12.0", "5070 ti", "5070ti"),
    _smi("RTX 5080", 16303, "12.0", "rtx 5080 16gb", "5080"),
    _smi("RTX 5090", 32607, "12.0", "rtx 5090 32gb", "5090"),
)

# Family names sold in several sizes whose NVML names carry the size: a bare one asks which
AMBIGUOUS: Dict[str, Tuple[str, ...]] = {
    "A100": ("A100 40GB", "A100 80GB"),
    "V100": ("V100 16GB", "V100 32GB"),
    "P100": ("P100 16GB", "P100 12GB"),
    "GTX 1060": ("GTX 1060 6GB", "GTX 1060 3GB"),
    "1060": ("GTX 1060 6GB", "GTX 1060 3GB"),
}
