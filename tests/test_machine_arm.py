"""The machine kind on 64-bit ARM (Linux aarch64, Apple silicon) names what chooses its kernels, as on x86."""

from solomon.machine import describe, kind, parse_cpuinfo

# The first processor of an AWS Graviton3 (Arm Neoverse V1), as Linux's /proc/cpuinfo prints it.
GRAVITON3 = """processor\t: 0
BogoMIPS\t: 2100.00
Features\t: fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp cpuid asimdrdm jscvt fcma lrcpc dcpop \
sha3 sm3 sm4 asimddp sha512 sve asimdfhm dit uscat ilrcpc flagm ssbs paca pacg dcpodp svei8mm svebf16 i8mm bf16 dgh rng
CPU implementer\t: 0x41
CPU architecture: 8
CPU variant\t: 0x1
CPU part\t: 0xd40
CPU revision\t: 1

processor\t: 1
Features\t: fp asimd
"""


def test_an_arm_cpuinfo_gives_its_features_and_microarchitecture() -> None:
    model, flags, micro = parse_cpuinfo(GRAVITON3)
    assert model == ""  # ARM's /proc/cpuinfo has no model name: the platform's words stand in
    assert {"sve", "bf16", "i8mm", "asimd"} <= flags and "sve2" not in flags
    assert micro == {"implementer": "0x41", "part": "0xd40"}


def test_an_arm_kind_names_its_vector_extension_and_bf16() -> None:
    machine = {"arch": "aarch64", "isa": ["sve", "bf16", "i8mm", "asimd"], "implementer": "0x41", "part": "0xd40",
               "torch_capability": "SVE256", "onednn": "3.12.0"}  # fmt: skip
    assert kind(machine) == "aarch64 implementer 0x41 part 0xd40, sve bf16, torch SVE256, oneDNN 3.12.0"
    apple = {"arch": "arm64", "isa": ["asimd"], "torch_capability": "DEFAULT"}
    assert kind(apple) == "arm64 asimd (no BF16), torch DEFAULT"


def test_an_x86_kind_is_unchanged_by_the_arm_fields() -> None:
    zen4 = {"arch": "x86_64", "isa": ["avx512_bf16", "avx512f", "avx2"], "vendor": "AuthenticAMD", "family": "25",
            "model": "17", "torch_capability": "AVX512", "onednn": "3.12.0"}  # fmt: skip
    assert kind(zen4) == "x86_64 AuthenticAMD family 25 model 17, avx512_bf16 (no AMX), torch AVX512, oneDNN 3.12.0"
    here = describe()
    assert here["kind"] == kind(here)
