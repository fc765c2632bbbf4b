//! Whole transposes and halo updates through the public API, every rank a thread of the
//! in-process communicator, checked cell by cell against the global-index oracle.

// A panic is how these tests report a failure; `allow-unwrap-in-tests` only covers the
// `#[test]` functions themselves, not the shared helpers below.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use cudecomp_core::testing::{halo_oracle, mock, oracle as fill};
use cudecomp_core::{
    Array, Buf, Communicator, DataType, Direction, Error, Exec, GridConfig, HaloBackend, HaloSpec,
    Handle, Memory, Settings, TransposeBackend, TransposeLayouts, TransposeOp,
};

fn as_buf(v: &mut [u64]) -> Array {
    // SAFETY: every test keeps the vector alive, and untouched, while the buffer is used.
    unsafe { Buf::new(v.as_mut_ptr().cast::<u8>(), std::mem::size_of_val(v)) }.into()
}

fn op(direction: Direction, layouts: TransposeLayouts) -> TransposeOp {
    TransposeOp {
        direction,
        layouts,
        dtype: DataType::Double,
        own_cells: true,
        fields: 1,
    }
}

fn handle(c: &dyn Communicator) -> Handle {
    let comm = c.split(0, c.rank() as i32).unwrap();
    Handle::from_communicator(comm, Memory::Host, Ok(Settings::default())).unwrap()
}

fn roundtrip(
    gdims: [i32; 3],
    pdims: [i32; 2],
    backend: TransposeBackend,
    contiguous: [bool; 3],
    in_place: bool,
    slice_bytes: Option<i64>,
) {
    let n = (pdims[0] * pdims[1]) as usize;
    mock::run(n, |c| {
        let h = handle(c);
        let cfg = GridConfig {
            gdims,
            pdims,
            transpose_comm_backend: backend as i32,
            transpose_axis_contiguous: contiguous,
            ..Default::default()
        };
        let mut g = h.create_grid(&cfg).unwrap();
        g.set_slice_bytes(slice_bytes);
        let gd = g.grid().gdims;
        for d in Direction::ALL {
            let lay = TransposeLayouts {
                input_halo: [1, 0, 2],
                output_padding: [0, 1, 1],
                ..Default::default()
            };
            let lay = if in_place {
                TransposeLayouts::default()
            } else {
                lay
            };
            let (a, b) = d.axes();
            let pi = g
                .grid()
                .pencil_info(a as i64, g.rank(), lay.input_halo, lay.input_padding)
                .unwrap();
            let po = g
                .grid()
                .pencil_info(b as i64, g.rank(), lay.output_halo, lay.output_padding)
                .unwrap();
            let mut input = fill(&pi, gd, u64::MAX);
            let expect = fill(&po, gd, u64::MAX - 1);
            let before = input.clone();
            let out = if in_place {
                input.resize(pi.size.max(po.size) as usize, 0);
                let buf = as_buf(&mut input);
                g.transpose(&op(d, lay), buf, buf, None, Exec::Host)
                    .unwrap();
                input.truncate(po.size as usize);
                input
            } else {
                let mut out = vec![u64::MAX - 1; po.size as usize];
                g.transpose(
                    &op(d, lay),
                    as_buf(&mut input),
                    as_buf(&mut out),
                    None,
                    Exec::Host,
                )
                .unwrap();
                assert_eq!(input, before, "{d:?} modified its input");
                out
            };
            assert_eq!(out, expect, "{d:?} rank {} {backend:?}", g.rank());
        }
        g.destroy().unwrap();
    });
}

#[test]
fn transposes_all_backends_on_mock() {
    for backend in [
        TransposeBackend::MpiP2p,
        TransposeBackend::MpiP2pPl,
        TransposeBackend::MpiA2a,
        TransposeBackend::Direct,
    ] {
        for (gdims, pdims) in [
            ([9, 10, 11], [2, 2]),
            ([5, 7, 3], [3, 1]),
            ([8, 8, 8], [1, 2]),
            ([4, 5, 6], [1, 1]),
        ] {
            for contiguous in [[false; 3], [true; 3], [true, false, true]] {
                for in_place in [false, true] {
                    roundtrip(gdims, pdims, backend, contiguous, in_place, None);
                    if backend == TransposeBackend::Direct {
                        // Slices of two cells: many slices per chunk.
                        roundtrip(gdims, pdims, backend, contiguous, in_place, Some(16));
                    }
                }
            }
        }
    }
}

#[test]
fn mismatched_configs_fail_on_every_rank() {
    let res = mock::run(3, |c| {
        let h = handle(c);
        let cfg = GridConfig {
            gdims: [4, 4, 4 + (c.rank() == 1) as i32],
            pdims: [3, 1],
            ..Default::default()
        };
        h.create_grid(&cfg).err()
    });
    assert!(res
        .iter()
        .all(|e| matches!(e, Some(Error::InvalidUsage(_)))));
}

#[test]
fn explicit_workspace_too_small() {
    mock::run(2, |c| {
        let h = handle(c);
        let cfg = GridConfig {
            gdims: [4, 4, 4],
            pdims: [2, 1],
            ..Default::default()
        };
        let g = h.create_grid(&cfg).unwrap();
        let mut a = vec![0u64; 64];
        let mut b = vec![0u64; 64];
        let mut w = vec![0u64; 4];
        let r = g.transpose(
            &op(Direction::XToY, TransposeLayouts::default()),
            as_buf(&mut a),
            as_buf(&mut b),
            Some(as_buf(&mut w)),
            Exec::Host,
        );
        assert!(matches!(r, Err(Error::InvalidUsage(_))));
    });
}

/// Reference §5 check: after updating dims 0, 1, 2 every non-padding cell holds the
/// index of its (periodically wrapped) global point, or the sentinel where the point
/// lies beyond a non-periodic boundary.
fn halo_case(
    pdims: [i32; 2],
    axis: usize,
    periods: [bool; 3],
    backend: HaloBackend,
    slice_bytes: Option<i64>,
) {
    let n = (pdims[0] * pdims[1]) as usize;
    let halo = [1, 2, 1];
    let padding = [1, 0, 2];
    mock::run(n, |c| {
        let h = handle(c);
        let cfg = GridConfig {
            gdims: [9, 10, 11],
            pdims,
            halo_comm_backend: backend as i32,
            transpose_axis_contiguous: [true, false, true],
            ..Default::default()
        };
        let mut g = h.create_grid(&cfg).unwrap();
        g.set_slice_bytes(slice_bytes);
        let gd = g.grid().gdims;
        let info = g
            .grid()
            .pencil_info(axis as i64, g.rank(), halo, padding)
            .unwrap();
        let sentinel = u64::MAX;
        let mut data = fill(&info, gd, sentinel);
        for dim in 0..3 {
            let spec = HaloSpec {
                axis,
                dim,
                halo,
                periods,
                padding,
            };
            g.update_halos(&spec, DataType::Double, as_buf(&mut data), None, Exec::Host)
                .unwrap();
        }
        assert_eq!(
            data,
            halo_oracle(&info, gd, periods, sentinel),
            "rank {} axis {axis} periods {periods:?}",
            g.rank()
        );
        g.destroy().unwrap();
    });
}

#[test]
fn halo_updates_on_mock() {
    for backend in [
        HaloBackend::Mpi,
        HaloBackend::MpiBlocking,
        HaloBackend::Direct,
    ] {
        for pdims in [[2, 2], [1, 2], [3, 1], [1, 1]] {
            for axis in 0..3 {
                for periods in [[false; 3], [true; 3], [true, false, true]] {
                    halo_case(pdims, axis, periods, backend, None);
                    if backend == HaloBackend::Direct {
                        // Slices of two cells: many slices per face.
                        halo_case(pdims, axis, periods, backend, Some(16));
                    }
                }
            }
        }
    }
}
