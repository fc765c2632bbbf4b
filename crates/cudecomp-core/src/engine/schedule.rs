//! The transpose pipeline's order of work as data: a pure function from the shape of one
//! run (how many units, how far packing runs ahead of unpacking, in place or not, whether
//! the transfer shares the SMs) to the list of steps the pipeline
//! ([`super::pipeline::TransposeRun::run`]) then interprets, and the rule that keeps
//! reused ring places from deadlocking. Golden tests below fix the order per profile.

/// One step of a transpose run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum PipelineStep {
    /// This rank's own cells that must move before anything else (in place: all of them
    /// through the workspace; out of place with everything packed first: the copy that
    /// runs while the slices travel).
    OwnBefore,
    /// Tells the exchange that the packing side is posted.
    Posted,
    /// Packs unit `u`'s slices, then marks it ready and exchanges it.
    Send(usize),
    /// From here on copies run beside a transfer (`true`) or alone (`false`).
    Background(bool),
    /// Waits for unit `unit` (copying pieces of the own cells meanwhile where the exchange
    /// polls), then unpacks it; `last`: nothing travels beside its unpacking.
    Receive {
        /// The unit.
        unit: usize,
        /// The run's last unit.
        last: bool,
    },
    /// Ends the exchange.
    Finish,
    /// The own cells still to copy, then what follows the exchange for them.
    OwnAfter,
}

/// What decides the order of one run's steps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct RunShape {
    /// Units of slices exchanged.
    pub(crate) units: usize,
    /// Units packed before the first unpacking (`usize::MAX`: all of them first).
    pub(crate) lag: usize,
    /// In place: the own cells go through the workspace before any packing.
    pub(crate) in_place: bool,
    /// The transfer runs on the SMs: copies beside it go in the mover's background mode.
    pub(crate) shares_sms: bool,
}

impl RunShape {
    /// Out of place with everything packed first: the own cells are copied once the
    /// packing side is posted, while the slices travel.
    pub(crate) fn own_first(&self) -> bool {
        self.lag == usize::MAX && !self.in_place
    }
}

/// Units packed before the first unpacking: all (in place), else the exchange's `lag`,
/// at least one.
pub(crate) fn lag_of(profile_lag: usize, in_place: bool) -> usize {
    if in_place {
        usize::MAX
    } else {
        profile_lag.max(1)
    }
}

/// The places a chunk's slices cycle through in the receiver's workspace, or `None` for
/// every slice at its own place. Rings need unpacking to follow packing closely: never
/// when everything is packed first, nor when slices land in the output. A writer of slice
/// `k` waits for the place of slice `k - places`, which the reader frees only after
/// packing its unit `k - places + lag - 1`: fewer places than `lag` would deadlock, so
/// such a ring is not used ([`ring_waits_are_met`] states the rule over a schedule).
pub(crate) fn ring_places(ring: Option<usize>, lag: usize, lands_in_output: bool) -> Option<usize> {
    if lag == usize::MAX || lands_in_output {
        None
    } else {
        ring.filter(|&p| p >= lag)
    }
}

/// The steps of one run of `shape`, in order.
pub(crate) fn transpose_steps(shape: RunShape) -> Vec<PipelineStep> {
    use PipelineStep::*;
    let n = shape.units;
    // Each unit is sent and received once; at most six steps besides.
    let mut steps = Vec::with_capacity(2 * n + 6);
    let mut unpacked = 0;
    // Waits for and unpacks units up to (excluding) `upto`; the first time, the own
    // cells that go first and the note that the packing side is posted.
    let mut drain = |steps: &mut Vec<PipelineStep>, upto: usize| {
        if unpacked == 0 && upto > 0 {
            if shape.own_first() {
                steps.push(OwnBefore);
            }
            steps.push(Posted);
        }
        while unpacked < upto {
            steps.push(Receive {
                unit: unpacked,
                last: unpacked + 1 == n,
            });
            unpacked += 1;
        }
    };
    if shape.in_place {
        steps.push(OwnBefore);
    }
    for u in 0..n {
        steps.push(Send(u));
        if u == 0 && shape.shares_sms {
            steps.push(Background(true));
        }
        // `u + 1` units are packed; all but the last `lag - 1` may be unpacked.
        if u + 1 >= shape.lag {
            drain(&mut steps, u + 2 - shape.lag);
        }
    }
    if n == 0 {
        steps.push(Posted);
    }
    drain(&mut steps, n);
    steps.push(Background(false));
    steps.push(Finish);
    if shape.own_first() && n == 0 {
        steps.push(OwnBefore);
    }
    steps.push(OwnAfter);
    steps
}

/// One step of a DIRECT single copy (each chunk written once, straight into its
/// receiver's output).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SingleCopyStep {
    /// Waits for the caller's event of input step `i`.
    WaitInput(usize),
    /// Copies the cells of input step `input` that belong to output step `step` into
    /// every receiver's output.
    Copy {
        /// The receivers' output step.
        step: usize,
        /// The input step.
        input: usize,
    },
    /// Tells every receiver taking its output in more than `step` steps that its step
    /// `step` is written.
    Deliver(usize),
    /// Waits for every chunk written into this rank's output.
    Arrived,
}

/// The steps of a single copy whose receivers take their output in `out_steps` steps
/// (1: whole) from an input written in `in_marks` steps (0: whole): every output step
/// goes through the input's steps in order, the first waiting for each input step's
/// event (the cells past the last mark need none), and is delivered once all of it is
/// written.
pub(crate) fn single_copy_steps(out_steps: usize, in_marks: usize) -> Vec<SingleCopyStep> {
    use SingleCopyStep::*;
    let mut steps = Vec::with_capacity(out_steps * (in_marks + 2) + in_marks + 1);
    for step in 0..out_steps.max(1) {
        for input in 0..=in_marks {
            if step == 0 && input < in_marks {
                steps.push(WaitInput(input));
            }
            steps.push(Copy { step, input });
        }
        steps.push(Deliver(step));
    }
    steps.push(Arrived);
    steps
}

/// The deadlock rule of rings over a schedule that every rank runs alike: a writer of
/// unit `k` reuses the place of unit `k - places`, which each reader frees when it
/// unpacks that unit; so the unpacking of unit `k - places` must come before the sending
/// of unit `k` in the schedule.
#[cfg(test)]
pub(crate) fn ring_waits_are_met(steps: &[PipelineStep], places: usize) -> bool {
    let at = |want: PipelineStep| steps.iter().position(|s| *s == want);
    let received = |u: usize| {
        steps
            .iter()
            .position(|s| matches!(s, PipelineStep::Receive { unit, .. } if *unit == u))
    };
    (places..)
        .take_while(|&k| at(PipelineStep::Send(k)).is_some())
        .all(
            |k| match (received(k - places), at(PipelineStep::Send(k))) {
                (Some(r), Some(s)) => r < s,
                _ => false,
            },
        )
}

#[cfg(test)]
mod tests {
    use super::PipelineStep::*;
    use super::*;

    fn shape(units: usize, lag: usize, in_place: bool, shares_sms: bool) -> RunShape {
        RunShape {
            units,
            lag: lag_of(lag, in_place),
            in_place,
            shares_sms,
        }
    }

    fn receive(unit: usize, last: bool) -> PipelineStep {
        Receive { unit, last }
    }

    #[test]
    fn everything_packed_first_copies_the_own_cells_while_slices_travel() {
        // Stream-ordered exchanges (MPI on devices, NCCL, NVSHMEM, DIRECT on devices).
        assert_eq!(
            transpose_steps(shape(3, usize::MAX, false, false)),
            vec![
                Send(0),
                Send(1),
                Send(2),
                OwnBefore,
                Posted,
                receive(0, false),
                receive(1, false),
                receive(2, true),
                Background(false),
                Finish,
                OwnAfter,
            ]
        );
    }

    #[test]
    fn nccl_copies_in_background_from_the_first_unit_on() {
        assert_eq!(
            transpose_steps(shape(2, usize::MAX, false, true)),
            vec![
                Send(0),
                Background(true),
                Send(1),
                OwnBefore,
                Posted,
                receive(0, false),
                receive(1, true),
                Background(false),
                Finish,
                OwnAfter,
            ]
        );
    }

    #[test]
    fn a_lag_of_one_unpacks_each_unit_after_packing_it() {
        // Host MPI point to point and pipelined.
        assert_eq!(
            transpose_steps(shape(3, 1, false, false)),
            vec![
                Send(0),
                Posted,
                receive(0, false),
                Send(1),
                receive(1, false),
                Send(2),
                receive(2, true),
                Background(false),
                Finish,
                OwnAfter,
            ]
        );
    }

    #[test]
    fn a_lag_of_two_keeps_one_unit_in_flight() {
        // Host DIRECT.
        assert_eq!(
            transpose_steps(shape(3, 2, false, false)),
            vec![
                Send(0),
                Send(1),
                Posted,
                receive(0, false),
                Send(2),
                receive(1, false),
                receive(2, true),
                Background(false),
                Finish,
                OwnAfter,
            ]
        );
    }

    #[test]
    fn in_place_moves_the_own_cells_first_and_packs_everything() {
        assert_eq!(
            transpose_steps(shape(2, 1, true, false)),
            vec![
                OwnBefore,
                Send(0),
                Send(1),
                Posted,
                receive(0, false),
                receive(1, true),
                Background(false),
                Finish,
                OwnAfter,
            ]
        );
    }

    #[test]
    fn no_units_still_posts_finishes_and_copies_the_own_cells() {
        assert_eq!(
            transpose_steps(shape(0, usize::MAX, false, false)),
            vec![Posted, Background(false), Finish, OwnBefore, OwnAfter]
        );
        assert_eq!(
            transpose_steps(shape(0, 2, false, false)),
            vec![Posted, Background(false), Finish, OwnAfter]
        );
    }

    #[test]
    fn every_unit_is_sent_and_received_once_in_order() {
        for units in 0..7 {
            for lag in [1, 2, 3, 5, usize::MAX] {
                for in_place in [false, true] {
                    let steps = transpose_steps(shape(units, lag, in_place, false));
                    let sent: Vec<usize> = steps
                        .iter()
                        .filter_map(|s| if let Send(u) = s { Some(*u) } else { None })
                        .collect();
                    let got: Vec<usize> = steps
                        .iter()
                        .filter_map(|s| {
                            if let Receive { unit, .. } = s {
                                Some(*unit)
                            } else {
                                None
                            }
                        })
                        .collect();
                    assert_eq!(sent, (0..units).collect::<Vec<_>>());
                    assert_eq!(got, (0..units).collect::<Vec<_>>());
                    assert_eq!(steps.iter().filter(|s| **s == Posted).count(), 1);
                    assert_eq!(steps.last(), Some(&OwnAfter));
                }
            }
        }
    }

    #[test]
    fn rings_are_used_only_where_their_waits_are_met() {
        for units in 1..12 {
            for lag in [1, 2, 3, 4] {
                for ring in 1..6 {
                    let steps = transpose_steps(shape(units, lag, false, false));
                    match ring_places(Some(ring), lag, false) {
                        Some(places) => {
                            assert!(ring_waits_are_met(&steps, places), "{units} {lag} {ring}")
                        }
                        // Refused rings would deadlock once a unit reuses a place.
                        None => assert!(units <= ring || !ring_waits_are_met(&steps, ring)),
                    }
                }
            }
        }
        assert_eq!(ring_places(Some(4), usize::MAX, false), None);
        assert_eq!(ring_places(Some(4), 2, true), None);
    }

    #[test]
    fn a_whole_single_copy_copies_delivers_and_waits() {
        use SingleCopyStep::*;
        assert_eq!(
            single_copy_steps(1, 0),
            [Copy { step: 0, input: 0 }, Deliver(0), Arrived]
        );
    }

    #[test]
    fn a_single_copy_waits_for_each_input_step_before_its_cells() {
        use SingleCopyStep::*;
        assert_eq!(
            single_copy_steps(1, 2),
            [
                WaitInput(0),
                Copy { step: 0, input: 0 },
                WaitInput(1),
                Copy { step: 0, input: 1 },
                Copy { step: 0, input: 2 },
                Deliver(0),
                Arrived
            ]
        );
    }

    #[test]
    fn each_output_step_is_delivered_once_all_its_cells_are_written() {
        use SingleCopyStep::*;
        let steps = single_copy_steps(3, 2);
        for (i, s) in steps.iter().enumerate() {
            match *s {
                // Every input step's wait comes before any of its cells are read.
                Copy { input, .. } if input < 2 => {
                    let wait = steps.iter().position(|t| *t == WaitInput(input));
                    assert!(wait.is_some_and(|w| w < i), "{steps:?}");
                }
                // A delivery follows every copy of its step, and precedes the next step's.
                Deliver(d) => {
                    let copies = |k: usize| {
                        steps
                            .iter()
                            .enumerate()
                            .filter(move |(_, t)| matches!(t, Copy { step, .. } if *step == k))
                            .map(|(j, _)| j)
                    };
                    assert!(copies(d).all(|j| j < i), "{steps:?}");
                    assert!(copies(d + 1).all(|j| j > i), "{steps:?}");
                }
                _ => {}
            }
        }
        assert_eq!(
            steps.iter().filter(|t| matches!(t, WaitInput(_))).count(),
            2
        );
        assert_eq!(steps.last(), Some(&Arrived));
    }
}
