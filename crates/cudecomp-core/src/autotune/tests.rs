//! The autotuner's tests: candidates, filters and searches on the in-process communicator.

use super::*;
use crate::comm::mock;
use crate::config::DataType;
use crate::handle::Memory;
use crate::settings::Settings;

fn options() -> AutotuneOptions {
    AutotuneOptions {
        n_warmup_trials: 1,
        n_trials: 2,
        grid_mode_halo: false,
        dtype: DataType::Double,
        allow_uneven_decompositions: true,
        disable_mpi_backends: false,
        disable_nccl_backends: false,
        disable_nvshmem_backends: false,
        skip_threshold: 0.0,
        autotune_transpose_backend: true,
        transpose_use_inplace_buffers: [false, true, false, true],
        transpose_use_library_arrays: false,
        transpose_op_weights: [1.0; 4],
        transpose_input_halo_extents: [[0; 3]; 4],
        transpose_output_halo_extents: [[0; 3]; 4],
        transpose_input_padding: [[0; 3]; 4],
        transpose_output_padding: [[0; 3]; 4],
        autotune_halo_backend: true,
        halo_extents: [1, 1, 1],
        halo_periods: [true; 3],
        halo_axis: 1,
        halo_padding: [0; 3],
    }
}

#[test]
fn grid_order_matches_upstream() {
    assert_eq!(
        candidate_grids(4, false, &AutotuneFilters::default()).unwrap(),
        [[4, 1], [2, 2], [1, 4]]
    );
    assert_eq!(
        candidate_grids(4, true, &AutotuneFilters::default()).unwrap(),
        [[1, 4], [2, 2], [4, 1]]
    );
}

#[test]
fn tunes_grid_and_backends_on_mock() {
    let chosen = mock::run(4, |c| {
        let h = Handle::from_communicator(
            c.split(0, c.rank() as i32).unwrap(),
            Memory::Host,
            Ok(Settings::default()),
        )
        .unwrap();
        let cfg = GridConfig {
            gdims: [8, 12, 6],
            ..Default::default()
        };
        let (gd, report) = h.create_grid_with(&cfg, &options()).unwrap();
        assert!(report.is_some_and(|r| !r.trials.is_empty()));
        let g = gd.grid().clone();
        gd.destroy().unwrap();
        (g.pdims, g.transpose_backend, g.halo_backend)
    });
    assert!(chosen.iter().all(|c| *c == chosen[0]));
    assert_eq!(chosen[0].0[0] * chosen[0].0[1], 4);
    assert!(chosen[0].1.is_mpi() && chosen[0].2.is_mpi());
}

#[test]
fn empty_grid_list_is_not_supported() {
    mock::run(4, |c| {
        let h = Handle::from_communicator(
            c.split(0, c.rank() as i32).unwrap(),
            Memory::Host,
            Ok(Settings::default()),
        )
        .unwrap();
        // 1 cell along X and Y: only 1 x 4 avoids empty pencils, and uneven splits are refused.
        let cfg = GridConfig {
            gdims: [1, 1, 7],
            ..Default::default()
        };
        let mut o = options();
        o.allow_uneven_decompositions = false;
        let r = h.create_grid_with(&cfg, &o).map(|(g, _)| g);
        assert!(matches!(r, Err(Error::NotSupported(_))), "{:?}", r.err());
    });
}
