#!/usr/bin/env bash
# Builds the release artefacts into dist/: four wheels — the GPU variant and the "+cpu" CPU
# variant, each for x86_64 and aarch64 — tagged manylinux_2_17 (manylinux2014), and the
# sdist; then checks every wheel with auditwheel (policy manylinux_2_17, nothing linked but
# libc) and unzip -t.
#
# Needs Python >= 3.11 and Rust (cargo, rustc >= 1.85). Everything else comes from PyPI
# into .venv/build: maturin, zig (the `ziglang` package; maturin links with it against
# glibc 2.17, whatever glibc this machine has) and auditwheel.
#
# The aarch64 Rust standard library comes from `rustup target add aarch64-unknown-linux-gnu`.
# Where rustup cannot download it (no access to the Rust distribution servers), the script
# falls back to Debian's own Rust (packages rustc-web, libstd-rust-web-dev and
# libstd-rust-web-dev:arm64, Debian 12 and later): `apt-get download`ed and unpacked into
# .venv/rust-web, nothing installed; this adds the arm64 architecture to dpkg
# (`dpkg --add-architecture arm64`, then `apt-get update`) if it is not there yet.
#
# Environment: CUDECOMP_WHEEL_ARCHES (default "x86_64 aarch64"), CUDECOMP_WHEEL_VARIANTS
# (default "gpu cpu"), CUDECOMP_DIST (default dist/), CUDECOMP_RUST_WEB=1 (use Debian's
# Rust for aarch64 even where rustup works), CUDECOMP_RUSTUP_TIMEOUT (seconds rustup may take
# to add a target, default 120).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PYTHON=${PYTHON:-python3}
OUT=${CUDECOMP_DIST:-$ROOT/dist}
ARCHES=${CUDECOMP_WHEEL_ARCHES:-"x86_64 aarch64"}
VARIANTS=${CUDECOMP_WHEEL_VARIANTS:-"gpu cpu"}
VENV="$ROOT/.venv/build"
RUST_WEB="$ROOT/.venv/rust-web"
BUILD_PKGS=(maturin==1.16.0 ziglang==0.17.1 auditwheel==6.8.2)
export PIP_DISABLE_PIP_VERSION_CHECK=1
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$ROOT/target}

log() { printf '\n==> %s\n' "$*"; }
die() { printf 'error: %s\n' "$*" >&2; exit 1; }

command -v cargo >/dev/null && command -v rustc >/dev/null \
    || die "building wheels needs the Rust toolchain (cargo and rustc >= 1.85) on PATH"

log "build tools (.venv/build: ${BUILD_PKGS[*]})"
[ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"
"$VENV/bin/pip" install -q "${BUILD_PKGS[@]}"
export PATH="$VENV/bin:$PATH"  # maturin finds zig (python -m ziglang) and auditwheel here

# has_std TRIPLE [RUSTC]: the toolchain has the standard library for TRIPLE.
has_std() {
    local dir
    dir=$("${2:-rustc}" --print target-libdir --target "$1" 2>/dev/null) || return 1
    compgen -G "$dir/libstd-*.rlib" >/dev/null
}

# Debian's Rust, unpacked (not installed) into .venv/rust-web, with the arm64 standard library.
setup_rust_web() {
    local rustc="$RUST_WEB/rustc"
    if [ -x "$rustc" ] && has_std aarch64-unknown-linux-gnu "$rustc"; then return 0; fi
    command -v apt-get >/dev/null && command -v dpkg >/dev/null \
        || die "no aarch64 Rust standard library: run 'rustup target add aarch64-unknown-linux-gnu' (or install Debian's libstd-rust-web-dev:arm64)"
    log "aarch64 standard library from Debian's Rust (rustc-web + libstd-rust-web-dev:arm64, unpacked into .venv/rust-web)"
    local sudo=; [ "$(id -u)" = 0 ] || sudo=sudo
    if ! grep -qx arm64 <<<"$(dpkg --print-foreign-architectures)"; then
        $sudo dpkg --add-architecture arm64
        $sudo apt-get update -q
    elif ! apt-cache show libstd-rust-web-dev:arm64 >/dev/null 2>&1; then
        $sudo apt-get update -q
    fi
    local ver libstd llvm debs
    ver=$(apt-cache policy rustc-web | awk '/Candidate:/ {print $2}')
    [ -n "$ver" ] && [ "$ver" != "(none)" ] || die "Debian's rustc-web is not available here"
    libstd=$(apt-cache show "libstd-rust-web-dev=$ver" | sed -n 's/^Depends:.*\(libstd-rust-web-[0-9][0-9.]*\) .*/\1/p' | head -n 1)
    llvm=$(apt-cache show "$libstd=$ver" | grep -o 'libllvm[0-9]*' | head -n 1)
    debs=$(mktemp -d)
    chmod 777 "$debs"  # apt-get download writes there as its sandbox user (_apt)
    (cd "$debs" && apt-get download -q "rustc-web=$ver" "$libstd=$ver" "libstd-rust-web-dev=$ver" \
        "libstd-rust-web-dev:arm64=$ver" "$llvm")
    rm -rf "$RUST_WEB"
    mkdir -p "$RUST_WEB"
    for d in "$debs"/*.deb; do dpkg -x "$d" "$RUST_WEB/root"; done
    rm -rf "$debs"
    # rustc finds its sysroot (../lib/rustlib) from its own path; it needs its libraries on the loader path.
    cat > "$rustc" <<EOF
#!/bin/sh
LD_LIBRARY_PATH="$RUST_WEB/root/usr/lib/x86_64-linux-gnu\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}" exec "$RUST_WEB/root/usr/bin/rustc" "\$@"
EOF
    chmod +x "$rustc"
    has_std aarch64-unknown-linux-gnu "$rustc" || die "Debian's Rust unpacked, but without the aarch64 standard library"
    "$rustc" --version
}

# toolchain_env ARCH: prints the environment (KEY=VALUE words) that builds for ARCH.
toolchain_env() {
    local triple="$1-unknown-linux-gnu"
    if [ "${CUDECOMP_RUST_WEB:-0}" != 1 ]; then
        if has_std "$triple"; then return 0; fi
        if command -v rustup >/dev/null && timeout "${CUDECOMP_RUSTUP_TIMEOUT:-120}" rustup target add "$triple" >&2 && has_std "$triple"; then
            return 0
        fi
        echo "rustup could not add $triple; trying Debian's Rust" >&2
    fi
    [ "$1" = aarch64 ] && [ "$(uname -m)" = x86_64 ] || die "no Rust standard library for $triple"
    setup_rust_web >&2
    # A separate target directory: another compiler's artefacts must not replace the host's.
    echo "RUSTC=$RUST_WEB/rustc CARGO_TARGET_DIR=$CARGO_TARGET_DIR/rust-web"
}

mkdir -p "$OUT"
rm -f "$OUT"/cudecomp-*.whl "$OUT"/cudecomp-*.tar.gz
STAGE=$(mktemp -d)
trap 'rm -rf "$STAGE"' EXIT

for arch in $ARCHES; do
    tenv=$(toolchain_env "$arch")
    for variant in $VARIANTS; do
        log "wheel: $variant variant, $arch (manylinux2014 via zig)${tenv:+, $tenv}"
        rm -rf "$STAGE/$variant-$arch"
        cpu=OFF; [ "$variant" = cpu ] && cpu=ON
        start=$SECONDS
        (cd "$ROOT" && env $tenv CUDECOMP_BUILD_CPU_ONLY=$cpu nice -n 10 maturin build --release --quiet \
            --zig --compatibility manylinux2014 --target "$arch-unknown-linux-gnu" -o "$STAGE/$variant-$arch")
        for whl in "$STAGE/$variant-$arch"/*.whl; do
            # The CPU variant carries the +cpu local version (as `pip install .` makes it, through
            # the in-tree build backend).
            whl=$(CUDECOMP_BUILD_CPU_ONLY=$cpu "$VENV/bin/python" "$ROOT/build_backend/cudecomp_build.py" relabel-wheel "$whl")
            mv "$whl" "$OUT/"
            echo "  $(basename "$whl") ($((SECONDS - start)) s)"
        done
    done
done

log "sdist"
(cd "$ROOT" && maturin sdist --out "$OUT" 2>&1 | tail -n 1)

# needed_only_libc WHEEL: the extension's DT_NEEDED entries are glibc's own libraries only.
needed_only_libc() {
    "$VENV/bin/python" - "$1" <<'PY'
import io, re, sys, zipfile
from elftools.elf.dynamic import DynamicSection
from elftools.elf.elffile import ELFFile
glibc = re.compile(r"(libc|libpthread|libdl|librt|libm)\.so\.\d+|ld-linux-(x86-64|aarch64)\.so\.\d+")
with zipfile.ZipFile(sys.argv[1]) as z:
    for name in z.namelist():
        if name.endswith(".so"):
            elf = ELFFile(io.BytesIO(z.read(name)))
            needed = [t.needed for s in elf.iter_sections() if isinstance(s, DynamicSection)
                      for t in s.iter_tags() if t.entry.d_tag == "DT_NEEDED"]
            other = [n for n in needed if not glibc.fullmatch(n)]
            print(f"       {name} needs {', '.join(needed)}")
            if other:
                sys.exit(f"       {name} needs more than glibc: {other}")
PY
}

log "checking the wheels"
fail=0
for whl in "$OUT"/cudecomp-*.whl; do
    name=$(basename "$whl")
    arch=$(sed -n 's/.*_\(x86_64\|aarch64\)\.whl$/\1/p' <<<"$name")
    report=$(auditwheel show "$whl" 2>&1 | tr -s ' \n' ' ')  # one line: auditwheel wraps its text
    if grep -q "is consistent with the following platform tag: \"manylinux_2_17_$arch\"" <<<"$report" \
        && needed_only_libc "$whl" && unzip -tq "$whl" >/dev/null; then
        echo "  ok   $name: auditwheel policy manylinux_2_17_$arch, nothing linked beyond glibc"
    else
        echo "  FAIL $name: $report"; fail=1
    fi
    meta=$(unzip -p "$whl" '*.dist-info/METADATA')
    case $name in
        *+cpu-*) grep -qx 'Version: [0-9.]*+cpu' <<<"$meta" || { echo "  FAIL $name: METADATA lacks +cpu"; fail=1; } ;;
        *) grep -qx 'Version: [0-9.]*' <<<"$meta" || { echo "  FAIL $name: METADATA version"; fail=1; } ;;
    esac
done
sdist=$(ls "$OUT"/cudecomp-*.tar.gz)
listing=$(tar tzf "$sdist")
for f in pyproject.toml build_backend/cudecomp_build.py LICENSE README.md Cargo.lock crates/cudecomp-py/build.rs; do
    grep -q "^cudecomp-[^/]*/$f\$" <<<"$listing" || { echo "  FAIL $(basename "$sdist") lacks $f"; fail=1; }
done
[ "$fail" = 0 ] && echo "  ok   $(basename "$sdist"): has the build backend, LICENSE, README, Cargo.lock"
[ "$fail" = 0 ] || die "a wheel or the sdist failed its checks"
log "dist/"
ls -l "$OUT"/cudecomp-*
