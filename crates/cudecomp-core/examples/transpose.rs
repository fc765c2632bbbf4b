//! The four global transposes and a halo update of a 3-D grid on the CPU, from Rust, on
//! `MPI_COMM_WORLD` (no Python, no mpi4py), every cell checked against its global index.
//!
//! ```text
//! cargo build --example transpose
//! mpiexec -n 4 target/debug/examples/transpose [BACKEND]
//! mpiexec -n 4 cargo run --example transpose -- [BACKEND]   # the same, built first
//! ```
//!
//! `BACKEND` is a transpose backend (`MPI_P2P`, the default, `MPI_P2P_PL`, `MPI_A2A` or
//! `DIRECT`). The MPI library is found as `MpiSession::init` says: `CUDECOMP_MPI_LIB`, or
//! `libmpi.so.40` / `libmpi.so.12` on the library path (`scripts/rust_example.sh` sets it
//! up for the MPICH and Open MPI wheels). Rank 0 prints a line per operation; the exit
//! status is non-zero on every rank when any cell on any rank is wrong.
//!
//! The `--8<--` comments mark the parts that the documentation site shows (docs/rust.md).

use std::process::ExitCode;

use cudecomp_core::testing::{halo_oracle, oracle};
use cudecomp_core::{
    Array, Buf, Communicator, DataType, Direction, Error, Exec, GridConfig, GridDesc, HaloSpec,
    Handle, Memory, MpiSession, Result, Settings, TransposeBackend, TransposeLayouts, TransposeOp,
};

/// Global grid: small, uneven extents, so that ranks own different numbers of cells.
const GDIMS: [i32; 3] = [24, 19, 17];
/// Marks cells no operation may write (halos, padding) and those it has not written yet.
const SENTINEL: u64 = u64::MAX;

// --8<-- [start:main]
fn main() -> ExitCode {
    let mpi = match MpiSession::init() {
        Ok(mpi) => mpi,
        Err(e) => {
            eprintln!("transpose example: {e}");
            return ExitCode::FAILURE;
        }
    };
    match run(&mpi) {
        // Every rank knows whether every rank passed: all finalise and exit alike.
        Ok(ok) => match mpi.finalize() {
            Ok(()) if ok => ExitCode::SUCCESS,
            Ok(()) => ExitCode::FAILURE,
            Err(e) => {
                eprintln!("transpose example: {e}");
                ExitCode::FAILURE
            }
        },
        // The other ranks may be waiting in a collective: end the whole job.
        Err(e) => {
            eprintln!("transpose example: {e}");
            mpi.abort(1)
        }
    }
}

/// A view of `v` for the library.
fn buf(v: &mut [u64]) -> Array {
    // SAFETY: every caller keeps the vector alive, and touches it only through this
    // buffer, until the operation it is passed to has returned (host operations complete
    // before returning).
    unsafe { Buf::new(v.as_mut_ptr().cast::<u8>(), std::mem::size_of_val(v)) }.into()
}
// --8<-- [end:main]

/// The most square process grid of `n` ranks, `P_rows >= P_cols`.
fn pdims(n: usize) -> [i32; 2] {
    let cols = (1..=n)
        .filter(|c| n % c == 0 && c * c <= n)
        .max()
        .unwrap_or(1);
    [(n / cols) as i32, cols as i32]
}

/// The implementation and its version: the version string up to its first comma, blanks
/// collapsed (`MPICH Version: 5.0.2`, `Open MPI v5.0.11`).
fn short_version(v: &str) -> String {
    let first = v
        .lines()
        .next()
        .unwrap_or("")
        .split(',')
        .next()
        .unwrap_or("");
    first.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// True on every rank when `mine` is true on every rank.
fn all_ranks(comm: &dyn Communicator, mine: bool) -> Result<bool> {
    let mut all = vec![0u8; comm.size()];
    comm.allgather(&[u8::from(mine)], &mut all)?;
    Ok(all.iter().all(|&b| b == 1))
}

// --8<-- [start:run]
/// Runs and checks every operation; true when every cell on every rank was right.
fn run(mpi: &MpiSession) -> Result<bool> {
    let backend = match std::env::args().nth(1) {
        None => TransposeBackend::MpiP2p,
        Some(name) => TransposeBackend::ALL
            .into_iter()
            .find(|b| b.enum_name() == name)
            .ok_or_else(|| Error::InvalidUsage(format!("unknown transpose backend {name}")))?,
    };
    let handle = Handle::from_mpi(&mpi.world(), Memory::Host, Settings::from_env())?;
    let nranks = handle.nranks();
    if handle.rank() == 0 {
        println!(
            "{} ranks, {} ({}), transpose backend {}",
            nranks,
            short_version(&mpi.version()?),
            mpi.abi().name(),
            backend.enum_name()
        );
    }
    let cfg = GridConfig {
        gdims: GDIMS,
        pdims: pdims(nranks),
        transpose_comm_backend: backend as i32,
        ..GridConfig::default()
    };
    let grid = handle.create_grid(&cfg)?;
    let mut ok = transposes(&grid, backend)?;
    ok &= halo_update(&grid)?;
    // Communicators are freed before MPI is finalised.
    grid.destroy()?;
    handle.finalize()?;
    Ok(ok)
}

/// X→Y, Y→Z, Z→Y and Y→X, each output checked against the oracle of its pencil.
fn transposes(grid: &GridDesc, backend: TransposeBackend) -> Result<bool> {
    let g = grid.grid();
    let info = |axis: i64| g.pencil_info(axis, grid.rank(), [0; 3], [0; 3]);
    let mut data = oracle(&info(0)?, g.gdims, SENTINEL);
    let mut ok = true;
    for direction in Direction::ALL {
        let (_, to) = direction.axes();
        let out_info = info(to as i64)?;
        let mut out = vec![SENTINEL; out_info.size as usize];
        let op = TransposeOp {
            direction,
            layouts: TransposeLayouts::default(),
            dtype: DataType::Double,
            own_cells: true,
            fields: 1,
        };
        grid.transpose(&op, buf(&mut data), buf(&mut out), None, Exec::Host)?;
        let good = out == oracle(&out_info, g.gdims, SENTINEL);
        let all = all_ranks(grid.handle().comm(), good)?;
        if grid.rank() == 0 {
            println!(
                "{:<18} {:<10} pdims {}x{}: {}",
                direction.method_name(),
                backend.enum_name(),
                g.pdims[0],
                g.pdims[1],
                if all { "ok" } else { "WRONG" }
            );
        }
        ok &= all;
        data = out;
    }
    Ok(ok)
}
// --8<-- [end:run]

/// Halo updates of the X-pencil along X, Y and Z (periodic in X and Z, not in Y): every
/// cell then holds the index of its global point, wrapped where periodic, and the sentinel
/// beyond the non-periodic boundary.
fn halo_update(grid: &GridDesc) -> Result<bool> {
    let g = grid.grid();
    let (halo, periods, padding) = ([1, 1, 1], [true, false, true], [0, 1, 0]);
    let info = g.pencil_info(0, grid.rank(), halo, padding)?;
    let mut data = oracle(&info, g.gdims, SENTINEL);
    for dim in 0..3 {
        let spec = HaloSpec {
            axis: 0,
            dim,
            halo,
            periods,
            padding,
        };
        grid.update_halos(&spec, DataType::Double, buf(&mut data), None, Exec::Host)?;
    }
    let good = data == halo_oracle(&info, g.gdims, periods, SENTINEL);
    let all = all_ranks(grid.handle().comm(), good)?;
    if grid.rank() == 0 {
        println!(
            "{:<18} {:<10} halo {halo:?} periods {periods:?}: {}",
            "update_halos",
            g.halo_backend.enum_name(),
            if all { "ok" } else { "WRONG" }
        );
    }
    Ok(all)
}
