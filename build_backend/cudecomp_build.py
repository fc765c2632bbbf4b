"""PEP 517 build backend of cudecomp: maturin's hooks, plus the CPU variant's local version.

maturin takes the version from Cargo.toml and has no option to add a local version label,
so for the CPU variant (``CUDECOMP_BUILD_CPU_ONLY=ON``, the same rule as
``crates/cudecomp-py/build.rs``) this backend rewrites what maturin built: the wheel's
``.dist-info`` directory name, the ``Version`` field of its METADATA, its RECORD (paths,
hashes, sizes) and the wheel's file name all get ``+cpu``; the same is done to the
metadata that ``prepare_metadata_for_build_wheel`` writes, so front ends see one version.
The GPU variant is maturin's wheel untouched. The sdist is variant-neutral.

Before delegating, every hook that compiles checks that a Rust toolchain is there and,
if not, stops with a message that names it (maturin would otherwise try to download one).
"""

from __future__ import annotations

import base64
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile

__all__ = [
    "build_editable",
    "build_sdist",
    "build_wheel",
    "get_requires_for_build_editable",
    "get_requires_for_build_sdist",
    "get_requires_for_build_wheel",
    "prepare_metadata_for_build_editable",
    "prepare_metadata_for_build_wheel",
]

#: The local version label of the CPU variant.
CPU_LOCAL_LABEL = "cpu"
#: The distribution's name as it appears in file names.
DIST = "cudecomp"
#: The oldest Rust the workspace builds with (Cargo.toml's rust-version).
MIN_RUST = "1.85"


def cpu_only() -> bool:
    """Tell whether the CPU variant is built (same rule as crates/cudecomp-py/build.rs)."""
    return os.environ.get("CUDECOMP_BUILD_CPU_ONLY", "").upper() in {"ON", "1", "TRUE", "YES"}


def local_label() -> str | None:
    """Return the local version label this build adds (``"cpu"`` or None)."""
    return CPU_LOCAL_LABEL if cpu_only() else None


# ---------------------------------------------------------------------------------------
# The Rust toolchain check


def _tool_version(tool: str) -> str | None:
    exe = os.environ.get(tool.upper()) or shutil.which(tool)
    if not exe:
        return None
    try:
        out = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=120, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    line = out.stdout.strip()
    return line if out.returncode == 0 and line.startswith(tool) else None


def check_rust() -> None:
    """Stop the build with a clear message when cargo or rustc is missing or unusable."""
    missing = [t for t in ("cargo", "rustc") if _tool_version(t) is None]
    if not missing:
        return
    sys.exit(
        "\n"
        f"error: building cudecomp from source needs the Rust toolchain (cargo and rustc >= {MIN_RUST}), "
        f"and {' and '.join(missing)} {'was' if len(missing) == 1 else 'were'} not found on PATH "
        "(or did not run).\n"
        "  - Install Rust with rustup or your distribution's cargo and rustc packages, make sure "
        "`cargo --version` works in this shell, and run pip again; or\n"
        "  - install a prebuilt cudecomp wheel for your platform instead of the source distribution.\n"
    )


# ---------------------------------------------------------------------------------------
# Rewriting the version


def _record_hash(data: bytes) -> str:
    digest = hashlib.sha256(data).digest()
    return "sha256=" + base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii")


def _split_dist_info(name: str) -> tuple[str, str]:
    """``cudecomp-0.1.0.dist-info`` -> (``cudecomp``, ``0.1.0``)."""
    stem = name[: -len(".dist-info")]
    dist, _, version = stem.partition("-")
    return dist, version


def _with_label(version: str, label: str) -> str:
    if "+" in version:
        raise RuntimeError(f"version {version!r} already has a local label; not adding +{label}")
    return f"{version}+{label}"


def _rewrite_metadata(text: str, new_version: str) -> str:
    lines = text.split("\n")
    for i, line in enumerate(lines):
        if line.startswith("Version:"):
            lines[i] = f"Version: {new_version}"
            return "\n".join(lines)
        if line == "":  # end of the headers
            break
    raise RuntimeError("METADATA has no Version field")


def relabel_metadata_dir(metadata_directory: str, dist_info: str, label: str) -> str:
    """Rename ``metadata_directory/dist_info`` and its Version to carry ``+label``; returns the new name."""
    dist, version = _split_dist_info(dist_info)
    new_version = _with_label(version, label)
    new_name = f"{dist}-{new_version}.dist-info"
    old_path = os.path.join(metadata_directory, dist_info)
    meta = os.path.join(old_path, "METADATA")
    with open(meta, encoding="utf-8") as f:
        text = f.read()
    with open(meta, "w", encoding="utf-8") as f:
        f.write(_rewrite_metadata(text, new_version))
    os.rename(old_path, os.path.join(metadata_directory, new_name))
    return new_name


def relabel_wheel(wheel_directory: str, filename: str, label: str) -> str:
    """Rewrite the wheel ``filename`` so that its version carries ``+label``; returns the new file name.

    Renames the ``.dist-info`` directory, rewrites METADATA's Version and RECORD (paths,
    sha256 and sizes), keeps every other entry's bytes, order and permissions.
    """
    name_part, version, rest = filename.split("-", 2)
    new_version = _with_label(version, label)
    new_filename = f"{name_part}-{new_version}-{rest}"
    old_di = f"{name_part}-{version}.dist-info/"
    new_di = f"{name_part}-{new_version}.dist-info/"
    src = os.path.join(wheel_directory, filename)

    with zipfile.ZipFile(src) as zin:
        infos = zin.infolist()
        if not any(i.filename.startswith(old_di) for i in infos):
            raise RuntimeError(f"{filename}: no {old_di} directory")
        contents: list[tuple[zipfile.ZipInfo, bytes]] = []
        for info in infos:
            data = zin.read(info)
            name = info.filename
            if name.startswith(old_di):
                name = new_di + name[len(old_di) :]
                if name == new_di + "METADATA":
                    data = _rewrite_metadata(data.decode("utf-8"), new_version).encode("utf-8")
            new_info = zipfile.ZipInfo(name, date_time=info.date_time)
            new_info.external_attr = info.external_attr
            new_info.create_system = info.create_system
            new_info.compress_type = zipfile.ZIP_DEFLATED
            contents.append((new_info, data))

    record_name = new_di + "RECORD"
    rows = []
    for info, data in contents:
        if info.filename == record_name:
            continue
        rows.append(f"{info.filename},{_record_hash(data)},{len(data)}")
    rows.append(f"{record_name},,")
    record = ("\n".join(rows) + "\n").encode("utf-8")

    fd, tmp = tempfile.mkstemp(dir=wheel_directory, suffix=".whl.part")
    os.close(fd)
    try:
        with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_DEFLATED) as zout:
            for info, data in contents:
                zout.writestr(info, record if info.filename == record_name else data)
        shutil.copymode(src, tmp)  # mkstemp made it private
        os.replace(tmp, os.path.join(wheel_directory, new_filename))
    except BaseException:
        os.unlink(tmp)
        raise
    if new_filename != filename:
        os.unlink(src)
    return new_filename


# ---------------------------------------------------------------------------------------
# The PEP 517 hooks


def _mat():
    import maturin  # imported late: the relabelling CLI below works without it

    return maturin


def get_requires_for_build_wheel(config_settings=None):
    """Build requirements of a wheel (maturin's; fails clearly without Rust)."""
    check_rust()
    return _mat().get_requires_for_build_wheel(config_settings)


def get_requires_for_build_editable(config_settings=None):
    """Build requirements of an editable wheel (as for a wheel)."""
    check_rust()
    return _mat().get_requires_for_build_editable(config_settings)


def get_requires_for_build_sdist(config_settings=None):
    """Build requirements of the sdist (maturin's)."""
    check_rust()
    return _mat().get_requires_for_build_sdist(config_settings)


def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    """Maturin's metadata, relabelled for the CPU variant."""
    check_rust()
    name = _mat().prepare_metadata_for_build_wheel(metadata_directory, config_settings)
    label = local_label()
    return relabel_metadata_dir(metadata_directory, name, label) if label else name


def prepare_metadata_for_build_editable(metadata_directory, config_settings=None):
    """As prepare_metadata_for_build_wheel."""
    return prepare_metadata_for_build_wheel(metadata_directory, config_settings)


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    """Maturin's wheel, relabelled for the CPU variant."""
    check_rust()
    # maturin is not handed metadata_directory: for the CPU variant it holds the relabelled
    # dist-info, and the wheel is relabelled as a whole below instead.
    name = _mat().build_wheel(wheel_directory, config_settings)
    label = local_label()
    return relabel_wheel(wheel_directory, name, label) if label else name


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    """Maturin's editable wheel, relabelled for the CPU variant."""
    check_rust()
    name = _mat().build_editable(wheel_directory, config_settings)
    label = local_label()
    return relabel_wheel(wheel_directory, name, label) if label else name


def build_sdist(sdist_directory, config_settings=None):
    """Maturin's sdist (both variants build from it)."""
    check_rust()
    return _mat().build_sdist(sdist_directory, config_settings)


def main(argv: list[str]) -> int:
    """``relabel-wheel WHEEL [LABEL]``: relabel a wheel maturin built directly (scripts use it).

    LABEL defaults to this build's label from ``CUDECOMP_BUILD_CPU_ONLY`` (nothing to do
    for the GPU variant). Prints the resulting wheel's path.
    """
    if len(argv) not in (2, 3) or argv[0] != "relabel-wheel":
        print("usage: cudecomp_build.py relabel-wheel WHEEL [LABEL]", file=sys.stderr)
        return 2
    path = os.path.abspath(argv[1])
    label = argv[2] if len(argv) == 3 else local_label()
    name = os.path.basename(path)
    if label:
        name = relabel_wheel(os.path.dirname(path), name, label)
    print(os.path.join(os.path.dirname(path), name))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
