#!/usr/bin/env bash
# Runs every example under MPI with an installed cudecomp and stops at the first failure
# (each example checks its own results and exits non-zero on a wrong one).
#
# Usage: bash scripts/examples.sh VENV [FAMILY | LAUNCHER]
#   VENV      a virtual environment under .venv/ with cudecomp, mpi4py and NumPy (mpich, openmpi, gpu),
#             or the path of a Python interpreter that has them (then pass LAUNCHER)
#   FAMILY    mpich or openmpi: use that family's launcher from setup.sh (default: VENV)
#   LAUNCHER  or the launcher command itself, e.g. "mpirun --oversubscribe"
# Environment: CUDECOMP_EXAMPLE_RANKS (default 4), CUDECOMP_EXAMPLE_TIMEOUT (seconds per
# example, default 120; the demo gets 300), CUDECOMP_EXAMPLE_SHARE (K/N: only the K-th of
# every N runs, the checkpoint-restart run counted last; unset, every run; scripts/test.sh
# gives each MPI family one half).
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh"
cd "$ROOT"

VENV=${1:?usage: bash scripts/examples.sh VENV [FAMILY | LAUNCHER]}
LAUNCH=${2:-$VENV}
case $LAUNCH in
    mpich | openmpi) LAUNCH=$(launcher "$LAUNCH") ;;
esac
[[ $VENV == */* && $LAUNCH == "$VENV" ]] && LAUNCH=""  # an interpreter's path: no family to take a launcher from
case $LAUNCH in
    mpich | openmpi | gpu | "") echo "examples.sh: no launcher for '$VENV'; pass one (mpich, openmpi or a command)" >&2; exit 2 ;;
esac
if [[ $VENV == */* ]]; then PY=$VENV; else PY="$VENVS/$VENV/bin/python"; fi
[ -x "$PY" ] || { echo "examples.sh: $PY not found" >&2; exit 2; }
NP=${CUDECOMP_EXAMPLE_RANKS:-4}
LIMIT=${CUDECOMP_EXAMPLE_TIMEOUT:-120}
SHARE=${CUDECOMP_EXAMPLE_SHARE:-0/1}
[[ $SHARE =~ ^([0-9]+)/([1-9][0-9]*)$ ]] && [ "${BASH_REMATCH[1]}" -lt "${BASH_REMATCH[2]}" ] ||
    { echo "CUDECOMP_EXAMPLE_SHARE must be K/N with 0 <= K < N, got $SHARE" >&2; exit 2; }
SHARE_K=${BASH_REMATCH[1]} SHARE_N=${BASH_REMATCH[2]}
in_share() { [ $(($1 % SHARE_N)) -eq "$SHARE_K" ]; }  # in_share INDEX: whether this share runs run INDEX

# One line per run: the script under examples/ and its options.
CASES=(
    "basic_usage.py"
    "basic_usage.py --backend MPI_A2A --axis-contiguous --dtype float32"
    "basic_usage_autotune.py"
    "halo_stencil.py"
    "halo_stencil.py --boundary dirichlet --pencil z --backend MPI_BLOCKING"
    "demo.py -n 32"
    "taylor_green.py -n 32 --t-end 1 --check"
    "poisson.py --sizes 8 16 32 --pdims 2x2"
    "jax_inverse_diffusion.py -n 16 --iterations 30"
)

for i in "${!CASES[@]}"; do
    in_share "$i" || continue
    case=${CASES[$i]}
    read -r -a argv <<<"$case"
    limit=$LIMIT
    [ "${argv[0]}" = demo.py ] && limit=$((LIMIT > 300 ? LIMIT : 300))
    log "[$VENV] examples/$case on $NP ranks"
    start=$EPOCHREALTIME
    set +e
    # stdin from /dev/null: a launcher must not swallow this loop's input. The autotuner's
    # per-candidate lines (tab-indented) are left out; its selection is kept.
    timeout "$limit" $LAUNCH -n "$NP" "$PY" "examples/${argv[0]}" "${argv[@]:1}" </dev/null 2>&1 | sed '/^CUDECOMP:\t/d'
    rc=${PIPESTATUS[0]}
    set -e
    seconds=$(awk -v a="$start" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }')
    if [ "$rc" -ne 0 ]; then
        [ "$rc" -eq 124 ] && echo "examples/$case: timed out after $limit s" >&2
        echo "examples/$case FAILED (exit status $rc, $seconds s)" >&2
        exit 1
    fi
    echo "  ($seconds s)"
done
# Checkpoint and restart on another rank count and process grid: the diagnostics of the
# restarted run equal those of an uninterrupted one.
if [ "$NP" -ge 3 ] && in_share "${#CASES[@]}"; then
    log "[$VENV] examples/taylor_green.py: checkpoint on 2 ranks at t = 0.5, restart on 3 ranks (1x3) to t = 1, against an uninterrupted run"
    tmp=$(mktemp -d)
    tg=(examples/taylor_green.py -n 32 --quiet)
    timeout "$LIMIT" $LAUNCH -n 2 "$PY" "${tg[@]}" --t-end 0.5 --checkpoint "$tmp/ck.h5" </dev/null >/dev/null
    timeout "$LIMIT" $LAUNCH -n 3 "$PY" "${tg[@]}" --t-end 1 --restart "$tmp/ck.h5" --pdims 1x3 --out "$tmp/restarted.txt" </dev/null >/dev/null
    timeout "$LIMIT" $LAUNCH -n "$NP" "$PY" "${tg[@]}" --t-end 1 --out "$tmp/uninterrupted.txt" </dev/null >/dev/null
    "$PY" - "$tmp/restarted.txt" "$tmp/uninterrupted.txt" <<'PY'
import sys
import numpy as np
a, b = (np.loadtxt(f, comments="#", ndmin=2) for f in sys.argv[1:])
assert a.shape == b.shape == (11, 5), (a.shape, b.shape)
assert np.allclose(a, b, rtol=1e-10, atol=0), np.abs(a - b).max()
print(f"  restarted run: {a.shape[0]} rows equal to the uninterrupted run's (largest difference {np.abs(a - b).max():.1e})")
PY
    rm -rf "$tmp"
fi
log "[$VENV] all examples passed${CUDECOMP_EXAMPLE_SHARE:+ (share $SHARE)}"
