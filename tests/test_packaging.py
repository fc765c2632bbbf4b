"""Packaging: the variant's version in the installed metadata, the in-tree build backend's
relabelling of CPU-variant wheels, its missing-toolchain message, and how the GPU variant
finds its CUDA libraries (override, cuda-pathfinder, our own search, soname)."""

from __future__ import annotations

import base64
import hashlib
import importlib.metadata
import os
import sys
import types
import zipfile

import pytest

import cudecomp
from cudecomp import _libs

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "build_backend"))

import cudecomp_build  # noqa: E402

# ---------------------------------------------------------------- version


def test_metadata_version_is_the_module_version() -> None:
    try:
        meta = importlib.metadata.version("cudecomp")
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("cudecomp is not installed as a distribution")
    # The installed distribution must be the one imported (not a stale copy elsewhere).
    dist = importlib.metadata.distribution("cudecomp")
    located = os.path.realpath(str(dist.locate_file("cudecomp/__init__.py")))
    if located != os.path.realpath(cudecomp.__file__):
        pytest.skip("the imported cudecomp is not the installed distribution")
    assert meta == cudecomp.__version__
    assert meta.endswith("+cpu") == cudecomp.CPU_ONLY


@pytest.mark.parametrize(
    ("value", "cpu"), [("ON", True), ("on", True), ("1", True), ("TRUE", True), ("yes", True), ("OFF", False), ("0", False), ("", False)]
)
def test_backend_variant_rule(monkeypatch: pytest.MonkeyPatch, value: str, cpu: bool) -> None:
    monkeypatch.setenv("CUDECOMP_BUILD_CPU_ONLY", value)
    assert cudecomp_build.cpu_only() is cpu
    assert cudecomp_build.local_label() == ("cpu" if cpu else None)


# ---------------------------------------------------------------- wheel relabelling


def _hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def _fake_wheel(directory: str) -> str:
    name = "cudecomp-0.1.0-cp311-abi3-linux_x86_64.whl"
    files = {
        "cudecomp/__init__.py": b"x = 1\n",
        "cudecomp/_cudecomp.abi3.so": b"\x7fELF" + bytes(100),
        "cudecomp-0.1.0.dist-info/METADATA": b"Metadata-Version: 2.4\nName: cudecomp\nVersion: 0.1.0\n\nVersion: 0.1.0 in the body\n",
        "cudecomp-0.1.0.dist-info/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: false\nTag: cp311-abi3-linux_x86_64\n",
        "cudecomp-0.1.0.dist-info/licenses/LICENSE": b"BSD\n",
    }
    record = "".join(f"{k},{_hash(v)},{len(v)}\n" for k, v in files.items()) + "cudecomp-0.1.0.dist-info/RECORD,,\n"
    with zipfile.ZipFile(os.path.join(directory, name), "w") as z:
        for k, v in files.items():
            info = zipfile.ZipInfo(k)
            info.external_attr = (0o755 if k.endswith(".so") else 0o644) << 16
            z.writestr(info, v)
        z.writestr("cudecomp-0.1.0.dist-info/RECORD", record)
    return name


def test_relabel_wheel(tmp_path) -> None:
    name = _fake_wheel(str(tmp_path))
    new = cudecomp_build.relabel_wheel(str(tmp_path), name, "cpu")
    assert new == "cudecomp-0.1.0+cpu-cp311-abi3-linux_x86_64.whl"
    assert os.listdir(tmp_path) == [new]
    with zipfile.ZipFile(tmp_path / new) as z:
        names = z.namelist()
        assert all(not n.startswith("cudecomp-0.1.0.dist-info") for n in names)
        di = "cudecomp-0.1.0+cpu.dist-info/"
        meta = z.read(di + "METADATA").decode()
        assert "\nVersion: 0.1.0+cpu\n" in meta
        assert meta.endswith("\nVersion: 0.1.0 in the body\n")  # only the header changes
        assert z.getinfo("cudecomp/_cudecomp.abi3.so").external_attr >> 16 == 0o755
        rows = [r.split(",") for r in z.read(di + "RECORD").decode().splitlines()]
        assert sorted(r[0] for r in rows) == sorted(names)
        for path, digest, size in rows:
            if path == di + "RECORD":
                assert (digest, size) == ("", "")
            else:
                data = z.read(path)
                assert (digest, int(size)) == (_hash(data), len(data)), path
    with pytest.raises(RuntimeError, match="already has a local label"):
        cudecomp_build.relabel_wheel(str(tmp_path), new, "cpu")


def test_relabel_metadata_dir(tmp_path) -> None:
    di = tmp_path / "cudecomp-0.1.0.dist-info"
    di.mkdir()
    (di / "METADATA").write_text("Metadata-Version: 2.4\nName: cudecomp\nVersion: 0.1.0\n\nbody\n")
    assert cudecomp_build.relabel_metadata_dir(str(tmp_path), di.name, "cpu") == "cudecomp-0.1.0+cpu.dist-info"
    assert (tmp_path / "cudecomp-0.1.0+cpu.dist-info" / "METADATA").read_text().splitlines()[2] == "Version: 0.1.0+cpu"


def test_missing_rust_is_named(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("CARGO", raising=False)
    monkeypatch.delenv("RUSTC", raising=False)
    with pytest.raises(SystemExit) as e:
        cudecomp_build.check_rust()
    msg = str(e.value)
    assert "needs the Rust toolchain" in msg and "cargo and rustc were not found" in msg


# ---------------------------------------------------------------- finding CUDA libraries


@pytest.fixture
def no_pathfinder(monkeypatch: pytest.MonkeyPatch) -> None:
    """Hide cuda-pathfinder (a None entry in sys.modules makes the import fail)."""
    monkeypatch.setitem(sys.modules, "cuda.pathfinder", None)


@pytest.fixture
def empty_system(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    monkeypatch.setattr(_libs, "_search_dirs", lambda: [str(tmp_path / "site-packages")])
    toolkits = [str(tmp_path / "cuda*" / "lib64"), str(tmp_path / "cuda*" / "targets" / "sbsa-linux" / "lib")]
    monkeypatch.setattr(_libs, "_TOOLKIT_DIRS", toolkits)
    monkeypatch.setattr(_libs, "_SYSTEM_DIRS", [str(tmp_path / "usr" / "lib" / "aarch64-linux-gnu")])


def _touch(path) -> str:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    open(path, "w").close()
    return str(path)


@pytest.mark.usefixtures("no_pathfinder", "empty_system")
def test_find_falls_back_to_sonames() -> None:
    assert _libs.find("nvrtc") == "libnvrtc.so.13"
    assert _libs.find("nccl") == "libnccl.so.2"
    assert _libs.find("nvshmem") == "libnvshmem_host.so.3"


@pytest.mark.usefixtures("no_pathfinder", "empty_system")
def test_find_overrides() -> None:
    # The overrides are the settings' CUDECOMP_*_LIB values, which the core reads.
    assert _libs.find("nccl", "/opt/nccl/libnccl.so.2") == "/opt/nccl/libnccl.so.2"
    assert _libs.find("nvrtc", "libnvrtc.so.13") == "libnvrtc.so.13"
    assert _libs.find("nvshmem", "/x/libnvshmem_host.so.3") == "/x/libnvshmem_host.so.3"


@pytest.mark.usefixtures("no_pathfinder", "empty_system")
def test_find_nvidia_wheels(tmp_path) -> None:
    # NVIDIA's x86_64 and aarch64 wheels share this layout.
    sp = tmp_path / "site-packages"
    assert _libs.find("nvrtc") == "libnvrtc.so.13"
    nvrtc = _touch(sp / "nvidia" / "cu13" / "lib" / "libnvrtc.so.13")
    nccl = _touch(sp / "nvidia" / "nccl" / "lib" / "libnccl.so.2")
    shmem = _touch(sp / "nvidia" / "nvshmem" / "lib" / "libnvshmem_host.so.3")
    assert (_libs.find("nvrtc"), _libs.find("nccl"), _libs.find("nvshmem")) == (nvrtc, nccl, shmem)


@pytest.mark.usefixtures("no_pathfinder", "empty_system")
def test_find_toolkit_and_system(tmp_path) -> None:
    # An aarch64 (SBSA) toolkit keeps its libraries under targets/sbsa-linux/lib; the newest toolkit wins.
    _touch(tmp_path / "cuda-13.0" / "targets" / "sbsa-linux" / "lib" / "libnvrtc.so.13")
    newest = _touch(tmp_path / "cuda-13.1" / "targets" / "sbsa-linux" / "lib" / "libnvrtc.so.13")
    nccl = _touch(tmp_path / "usr" / "lib" / "aarch64-linux-gnu" / "libnccl.so.2")
    assert _libs.find("nvrtc") == newest
    assert _libs.find("nccl") == nccl
    lib64 = _touch(tmp_path / "cuda-12.9" / "lib64" / "libnvrtc.so.13")
    assert _libs.find("nvrtc") == lib64  # lib64 is searched before targets/*/lib


@pytest.mark.usefixtures("empty_system")
def test_find_prefers_pathfinder(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    asked = []

    def load(name: str) -> types.SimpleNamespace:
        asked.append(name)
        if name == "nccl":
            raise RuntimeError("not found")  # any failure falls back to our search
        return types.SimpleNamespace(abs_path=f"/pf/lib{name}.so")

    monkeypatch.setitem(sys.modules, "cuda.pathfinder", types.SimpleNamespace(load_nvidia_dynamic_lib=load))
    nccl = _touch(tmp_path / "site-packages" / "nvidia" / "nccl" / "lib" / "libnccl.so.2")
    assert _libs.find("nvrtc") == "/pf/libnvrtc.so"
    assert _libs.find("nvshmem") == "/pf/libnvshmem_host.so"
    assert _libs.find("nccl") == nccl
    assert asked == ["nvrtc", "nvshmem_host", "nccl"]
    assert _libs.find("nvrtc", "/mine/libnvrtc.so.13") == "/mine/libnvrtc.so.13"  # the override comes first
    assert asked == ["nvrtc", "nvshmem_host", "nccl"]
