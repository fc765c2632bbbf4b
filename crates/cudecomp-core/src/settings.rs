//! Every `CUDECOMP_*` variable the library reads, read in one place.
//!
//! A [`Settings`] is made once, when a handle is created ([`Settings::from_env`]), checked
//! there (a bad value is `InvalidUsage` naming the variable, what it takes and what it
//! got), agreed across the handle's ranks where ranks must run alike
//! ([`Settings::agreed_fields`]), and then passed down: nothing else in the library reads
//! the environment. The few variables needed before any handle exists (the MPI library a
//! Rust program opens, the launcher that started it) are read by the functions at the end
//! of this module.

use std::path::PathBuf;

use crate::config::{HaloBackend, TransposeBackend};
use crate::{Error, Fields, Result};

/// Whether DIRECT transposes between library arrays copy each cell once
/// (`CUDECOMP_SINGLE_COPY`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SingleCopy {
    /// Unset: on the host always; on GPUs where the copy engine carries every chunk.
    #[default]
    Auto,
    /// `0`: never.
    Never,
    /// `1`: always.
    Always,
}

/// The order of a streamed slab FFT's backward transform (`CUDECOMP_FFT_BACKWARD`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum FftBackward {
    /// `rows`: the FFTs along Z in slabs of Y rows, each sent while the next is transformed.
    #[default]
    Rows,
    /// `planes`: the FFT along Z whole, then the exchange landing in slabs of Z planes.
    Planes,
}

impl FftBackward {
    /// The variable's value that selects this order.
    pub fn name(self) -> &'static str {
        match self {
            FftBackward::Rows => "rows",
            FftBackward::Planes => "planes",
        }
    }
}

/// Default of [`FftSettings::chunks`].
pub(crate) const FFT_CHUNKS: usize = 8;

/// Settings of the distributed FFTs of the Python package (`cudecomp.fft`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FftSettings {
    /// `CUDECOMP_FFT_STREAM` (`0`, `1` or `auto`): whether slab-xy plans on DIRECT stream
    /// their slabs (`None`, `auto`: where every rank has a GPU of its own).
    pub stream: Option<bool>,
    /// `CUDECOMP_FFT_CHUNKS`: slabs a streamed plan cuts each direction into.
    pub chunks: usize,
    /// `CUDECOMP_FFT_BACKWARD`.
    pub backward: FftBackward,
}

impl Default for FftSettings {
    fn default() -> Self {
        FftSettings {
            stream: None,
            chunks: FFT_CHUNKS,
            backward: FftBackward::Rows,
        }
    }
}

/// Settings of the performance report (`CUDECOMP_ENABLE_PERFORMANCE_REPORT=1`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PerfSettings {
    /// `CUDECOMP_PERFORMANCE_REPORT_DETAIL` (0, 1, 2): 1 writes rank 0's samples to CSV, 2
    /// every rank's.
    pub detail: u8,
    /// `CUDECOMP_PERFORMANCE_REPORT_SAMPLES`: most recent samples kept per configuration.
    pub samples: usize,
    /// `CUDECOMP_PERFORMANCE_REPORT_WARMUP_SAMPLES`: first samples of each configuration
    /// ignored.
    pub warmup: usize,
    /// `CUDECOMP_PERFORMANCE_REPORT_WRITE_DIR`: where CSV files go (`None`: none written).
    pub write_dir: Option<PathBuf>,
}

impl Default for PerfSettings {
    fn default() -> Self {
        PerfSettings {
            detail: 0,
            samples: 20,
            warmup: 3,
            write_dir: None,
        }
    }
}

/// The autotuner's filters of its candidates (`CUDECOMP_AUTOTUNE_*`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AutotuneFilters {
    /// `CUDECOMP_AUTOTUNE_TRANSPOSE_BACKENDS`: transpose backends the search may try.
    pub transpose_backends: Option<NameFilter>,
    /// `CUDECOMP_AUTOTUNE_HALO_BACKENDS`: halo backends the search may try.
    pub halo_backends: Option<NameFilter>,
    /// `CUDECOMP_AUTOTUNE_P_ROW_RANGE`: allowed numbers of process-grid rows.
    pub p_row_range: Option<(i32, i32)>,
    /// `CUDECOMP_AUTOTUNE_P_COL_RANGE`: allowed numbers of process-grid columns.
    pub p_col_range: Option<(i32, i32)>,
}

/// A list of backend names to keep, or (with a leading `^`) to leave out.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NameFilter {
    /// The names leave the candidates out instead of being the only ones kept.
    pub exclude: bool,
    /// Upper-case backend names (`MPI_P2P`, `NCCL`, ...).
    pub names: Vec<String>,
}

impl NameFilter {
    /// Whether the backend named `name` passes the filter.
    pub fn keeps(&self, name: &str) -> bool {
        self.names.iter().any(|n| n == name) != self.exclude
    }
}

/// Where a GPU handle finds its CUDA libraries when the user says so (`None`: searched).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LibraryOverrides {
    /// `CUDECOMP_NVRTC_LIB`: `libnvrtc.so.13`.
    pub nvrtc: Option<String>,
    /// `CUDECOMP_NCCL_LIB`: `libnccl.so.2`.
    pub nccl: Option<String>,
    /// `CUDECOMP_NVSHMEM_LIB`: `libnvshmem_host.so.3`.
    pub nvshmem: Option<String>,
}

/// How ranks are grouped into nodes when the host names should not decide (testing).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NodeSettings {
    /// `CUDECOMP_NODE_ID` (per rank): ranks with the same text form one node.
    pub node_id: Option<String>,
    /// `CUDECOMP_SIMULATE_NODES=k`: the handle's ranks form `k` contiguous blocks.
    pub simulate_nodes: Option<usize>,
}

/// Default of [`Settings::shared_array_min_bytes`]: smaller library arrays stay ordinary
/// memory (a single copy gains nothing on small transposes, and each shared array holds a
/// file descriptor).
pub(crate) const SHARED_ARRAY_MIN_BYTES: usize = 1 << 20;

/// Default share of the SMs that background copies may use ([`Settings::background_sm_percent`]).
pub(crate) const BACKGROUND_SM_PERCENT: u32 = 50;

/// Every setting of a handle, from the `CUDECOMP_*` environment variables (see
/// `docs/environment.md` for each).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Settings {
    /// `CUDECOMP_CHECK_COLLECTIVES=1`: ranks agree on each operation before it moves data.
    pub check_collectives: bool,
    /// `CUDECOMP_PIPELINE_SLICE_BYTES`: one slice size for every pipeline (`None`: each
    /// exchange's own).
    pub pipeline_slice_bytes: Option<i64>,
    /// `CUDECOMP_SINGLE_COPY`.
    pub single_copy: SingleCopy,
    /// `CUDECOMP_SINGLE_COPY_BLOCK_BYTES`: input bytes per piece of a host single copy
    /// (`None`: chosen per transpose; 0: whole chunks).
    pub single_copy_block_bytes: Option<i64>,
    /// `CUDECOMP_SHARED_ARRAY_MIN_BYTES`: library arrays of DIRECT grids from this size on
    /// are memory the node's other ranks map.
    pub shared_array_min_bytes: usize,
    /// `CUDECOMP_HOST_THREADS`: threads each rank copies with (`None`: its share of the
    /// node's cores).
    pub host_threads: Option<usize>,
    /// `CUDECOMP_HOST_STREAMING` (default on): large host outputs are written with
    /// streaming stores.
    pub host_streaming: bool,
    /// `CUDECOMP_BACKGROUND_SM_PERCENT`: share of the SMs packing and unpacking kernels
    /// use while NCCL's kernels run.
    pub background_sm_percent: u32,
    /// `CUDECOMP_ENABLE_NCCL_UBR` (default on): NCCL exchanges through a registered
    /// workspace.
    pub nccl_registration: bool,
    /// `CUDECOMP_MPI_CUDA_AWARE`: whether MPI takes device memory (`None`: what MPI says).
    pub mpi_cuda_aware: Option<bool>,
    /// `CUDECOMP_USE_COL_MAJOR_RANK_ORDER=1`: `RankOrder.DEFAULT` resolves to column-major.
    pub col_major_rank_order: bool,
    /// `CUDECOMP_NODE_ID`, `CUDECOMP_SIMULATE_NODES`.
    pub nodes: NodeSettings,
    /// The performance report (`None`: off).
    pub perf: Option<PerfSettings>,
    /// `CUDECOMP_AUTOTUNE_*`.
    pub autotune: AutotuneFilters,
    /// `CUDECOMP_FFT_*`.
    pub fft: FftSettings,
    /// `CUDECOMP_NVRTC_LIB`, `CUDECOMP_NCCL_LIB`, `CUDECOMP_NVSHMEM_LIB`.
    pub libraries: LibraryOverrides,
    /// `CUDECOMP_IO_WRITE`: how `cudecomp.io`'s ranks put their bytes into the file.
    pub io_write: IoWrite,
}

/// `CUDECOMP_IO_WRITE`: how a rank's bytes go into a file of `cudecomp.io`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum IoWrite {
    /// `auto` (default): the rank's range of the file mapped (`mmap`) and its bytes
    /// copied in, where the file's blocks were allocated before the write (a mapping
    /// could report a full disk only by a signal); positioned writes otherwise.
    #[default]
    Auto,
    /// `pwrite`: positioned writes of large pieces, always.
    Positioned,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            check_collectives: false,
            pipeline_slice_bytes: None,
            single_copy: SingleCopy::Auto,
            single_copy_block_bytes: None,
            shared_array_min_bytes: SHARED_ARRAY_MIN_BYTES,
            host_threads: None,
            host_streaming: true,
            background_sm_percent: BACKGROUND_SM_PERCENT,
            nccl_registration: true,
            mpi_cuda_aware: None,
            col_major_rank_order: false,
            nodes: NodeSettings::default(),
            perf: None,
            autotune: AutotuneFilters::default(),
            fft: FftSettings::default(),
            libraries: LibraryOverrides::default(),
            io_write: IoWrite::Auto,
        }
    }
}

/// A variable's value, trimmed; `None` when unset or empty.
fn var(name: &str) -> Option<String> {
    let v = std::env::var(name).ok()?;
    let v = v.trim();
    (!v.is_empty()).then(|| v.to_owned())
}

fn bad(name: &str, expected: &str, got: &str) -> Error {
    Error::InvalidUsage(format!("{name}: expected {expected}, got {got:?}"))
}

/// Reads variables through `lookup` (the environment, or a table in tests).
struct Reader<'a> {
    lookup: &'a dyn Fn(&str) -> Option<String>,
}

impl Reader<'_> {
    fn text(&self, name: &str) -> Option<String> {
        (self.lookup)(name)
    }

    /// `0` or `1`.
    fn flag(&self, name: &str) -> Result<Option<bool>> {
        match self.text(name).as_deref() {
            None => Ok(None),
            Some("0") => Ok(Some(false)),
            Some("1") => Ok(Some(true)),
            Some(v) => Err(bad(name, "0 or 1", v)),
        }
    }

    /// An integer in `range`, described as `expected`.
    fn number<T: std::str::FromStr + PartialOrd>(
        &self,
        name: &str,
        range: std::ops::RangeInclusive<T>,
        expected: &str,
    ) -> Result<Option<T>> {
        let Some(v) = self.text(name) else {
            return Ok(None);
        };
        match v.parse::<T>() {
            Ok(n) if range.contains(&n) => Ok(Some(n)),
            _ => Err(bad(name, expected, &v)),
        }
    }

    /// A comma-separated list of `known` names, optionally led by `^`.
    fn names(&self, name: &str, known: &[&str]) -> Result<Option<NameFilter>> {
        let Some(spec) = self.text(name) else {
            return Ok(None);
        };
        let (exclude, body) = match spec.strip_prefix('^') {
            Some(b) => (true, b),
            None => (false, spec.as_str()),
        };
        let names: Vec<String> = body.split(',').map(|n| n.trim().to_owned()).collect();
        if names.iter().any(|n| !known.contains(&n.as_str())) {
            return Err(Error::InvalidUsage(format!(
                "{name}={spec:?}: expected a comma-separated list of {known:?}, optionally starting with '^'"
            )));
        }
        Ok(Some(NameFilter { exclude, names }))
    }

    /// `min,max` with `0 <= min <= max` and `max > 0`.
    fn range(&self, name: &str) -> Result<Option<(i32, i32)>> {
        let Some(spec) = self.text(name) else {
            return Ok(None);
        };
        let parts: Vec<Option<i32>> = spec.split(',').map(|v| v.trim().parse().ok()).collect();
        match parts.as_slice() {
            [Some(lo), Some(hi)] if *lo >= 0 && *hi > 0 && lo <= hi => Ok(Some((*lo, *hi))),
            _ => Err(Error::InvalidUsage(format!(
                "{name}={spec:?}: expected 'min,max' with 0 <= min <= max and max > 0"
            ))),
        }
    }
}

impl Settings {
    /// The settings of the process's environment; the first bad value is `InvalidUsage`.
    pub fn from_env() -> Result<Settings> {
        Settings::from_lookup(&var)
    }

    /// The settings that `lookup` (variable name → trimmed, non-empty value) describes.
    pub fn from_lookup(lookup: &dyn Fn(&str) -> Option<String>) -> Result<Settings> {
        let r = Reader { lookup };
        let d = Settings::default();
        let single_copy = match r.flag("CUDECOMP_SINGLE_COPY")? {
            None => SingleCopy::Auto,
            Some(false) => SingleCopy::Never,
            Some(true) => SingleCopy::Always,
        };
        // The report's own variables are checked whether the report is on or not: a typo
        // waits for the day someone turns it on otherwise.
        let p = PerfSettings::default();
        let report = PerfSettings {
            detail: r
                .number("CUDECOMP_PERFORMANCE_REPORT_DETAIL", 0..=2, "0, 1 or 2")?
                .unwrap_or(p.detail),
            samples: r
                .number(
                    "CUDECOMP_PERFORMANCE_REPORT_SAMPLES",
                    1..=usize::MAX,
                    "a positive number of samples",
                )?
                .unwrap_or(p.samples),
            warmup: r
                .number(
                    "CUDECOMP_PERFORMANCE_REPORT_WARMUP_SAMPLES",
                    0..=usize::MAX,
                    "a non-negative number of samples",
                )?
                .unwrap_or(p.warmup),
            write_dir: r
                .text("CUDECOMP_PERFORMANCE_REPORT_WRITE_DIR")
                .map(PathBuf::from),
        };
        let perf = (r.flag("CUDECOMP_ENABLE_PERFORMANCE_REPORT")? == Some(true)).then_some(report);
        let backward = match r.text("CUDECOMP_FFT_BACKWARD").as_deref() {
            None | Some("rows") => FftBackward::Rows,
            Some("planes") => FftBackward::Planes,
            Some(v) => return Err(bad("CUDECOMP_FFT_BACKWARD", "rows or planes", v)),
        };
        let transposes: Vec<&str> = TransposeBackend::ALL
            .iter()
            .map(|b| b.enum_name())
            .collect();
        let halos: Vec<&str> = HaloBackend::ALL.iter().map(|b| b.enum_name()).collect();
        Ok(Settings {
            check_collectives: r.flag("CUDECOMP_CHECK_COLLECTIVES")?.unwrap_or(false),
            pipeline_slice_bytes: r.number(
                "CUDECOMP_PIPELINE_SLICE_BYTES",
                1..=i64::MAX,
                "a positive number of bytes",
            )?,
            single_copy,
            single_copy_block_bytes: r.number(
                "CUDECOMP_SINGLE_COPY_BLOCK_BYTES",
                0..=i64::MAX,
                "a non-negative number of bytes (0: whole chunks)",
            )?,
            shared_array_min_bytes: r
                .number(
                    "CUDECOMP_SHARED_ARRAY_MIN_BYTES",
                    0..=usize::MAX,
                    "a non-negative number of bytes",
                )?
                .unwrap_or(d.shared_array_min_bytes),
            host_threads: r.number(
                "CUDECOMP_HOST_THREADS",
                1..=usize::MAX,
                "a positive number of threads",
            )?,
            host_streaming: r.flag("CUDECOMP_HOST_STREAMING")?.unwrap_or(true),
            background_sm_percent: r
                .number(
                    "CUDECOMP_BACKGROUND_SM_PERCENT",
                    1..=100,
                    "a percentage from 1 to 100",
                )?
                .unwrap_or(d.background_sm_percent),
            nccl_registration: r.flag("CUDECOMP_ENABLE_NCCL_UBR")?.unwrap_or(true),
            mpi_cuda_aware: r.flag("CUDECOMP_MPI_CUDA_AWARE")?,
            col_major_rank_order: r
                .flag("CUDECOMP_USE_COL_MAJOR_RANK_ORDER")?
                .unwrap_or(false),
            nodes: NodeSettings {
                node_id: r.text("CUDECOMP_NODE_ID"),
                simulate_nodes: r.number(
                    "CUDECOMP_SIMULATE_NODES",
                    1..=usize::MAX,
                    "a positive number of nodes",
                )?,
            },
            perf,
            autotune: AutotuneFilters {
                transpose_backends: r.names("CUDECOMP_AUTOTUNE_TRANSPOSE_BACKENDS", &transposes)?,
                halo_backends: r.names("CUDECOMP_AUTOTUNE_HALO_BACKENDS", &halos)?,
                p_row_range: r.range("CUDECOMP_AUTOTUNE_P_ROW_RANGE")?,
                p_col_range: r.range("CUDECOMP_AUTOTUNE_P_COL_RANGE")?,
            },
            fft: FftSettings {
                stream: match r.text("CUDECOMP_FFT_STREAM").as_deref() {
                    None | Some("auto") => None,
                    Some(_) => r.flag("CUDECOMP_FFT_STREAM")?,
                },
                chunks: r
                    .number(
                        "CUDECOMP_FFT_CHUNKS",
                        1..=usize::MAX,
                        "a positive number of slabs",
                    )?
                    .unwrap_or(FFT_CHUNKS),
                backward,
            },
            libraries: LibraryOverrides {
                nvrtc: r.text("CUDECOMP_NVRTC_LIB"),
                nccl: r.text("CUDECOMP_NCCL_LIB"),
                nvshmem: r.text("CUDECOMP_NVSHMEM_LIB"),
            },
            io_write: match r.text("CUDECOMP_IO_WRITE").as_deref() {
                None | Some("auto") => IoWrite::Auto,
                Some("pwrite") => IoWrite::Positioned,
                Some(v) => return Err(bad("CUDECOMP_IO_WRITE", "auto or pwrite", v)),
            },
        })
    }

    /// The settings every rank of a handle must share, by variable name: those that decide
    /// collective steps (which path a transpose takes, how it is sliced, whether ranks
    /// agree before each operation, what the autotuner searches, what the performance
    /// report gathers, an FFT plan's schedule). Per-rank settings (node names, copy
    /// threads, streaming stores, library paths) may differ, as may NCCL registration,
    /// which the ranks settle among themselves (none registers unless all do).
    pub fn agreed_fields(&self) -> Fields {
        let a = &self.autotune;
        let mut f = Fields::new();
        let mut add = |name: &str, text: String| f.push(name, text);
        add(
            "CUDECOMP_CHECK_COLLECTIVES",
            shown(&Some(self.check_collectives)),
        );
        add(
            "CUDECOMP_PIPELINE_SLICE_BYTES",
            shown(&self.pipeline_slice_bytes),
        );
        add("CUDECOMP_SINGLE_COPY", format!("{:?}", self.single_copy));
        add("CUDECOMP_MPI_CUDA_AWARE", shown(&self.mpi_cuda_aware));
        add(
            "CUDECOMP_USE_COL_MAJOR_RANK_ORDER",
            shown(&Some(self.col_major_rank_order)),
        );
        add("CUDECOMP_SIMULATE_NODES", shown(&self.nodes.simulate_nodes));
        add(
            "CUDECOMP_ENABLE_PERFORMANCE_REPORT",
            shown(&Some(self.perf.is_some())),
        );
        if let Some(p) = &self.perf {
            // What the report gathers (the directory is rank 0's alone).
            add("CUDECOMP_PERFORMANCE_REPORT_DETAIL", p.detail.to_string());
            add("CUDECOMP_PERFORMANCE_REPORT_SAMPLES", p.samples.to_string());
            add(
                "CUDECOMP_PERFORMANCE_REPORT_WARMUP_SAMPLES",
                p.warmup.to_string(),
            );
        }
        add(
            "CUDECOMP_AUTOTUNE_TRANSPOSE_BACKENDS",
            shown(&a.transpose_backends),
        );
        add("CUDECOMP_AUTOTUNE_HALO_BACKENDS", shown(&a.halo_backends));
        add("CUDECOMP_AUTOTUNE_P_ROW_RANGE", shown(&a.p_row_range));
        add("CUDECOMP_AUTOTUNE_P_COL_RANGE", shown(&a.p_col_range));
        add("CUDECOMP_FFT_STREAM", shown(&self.fft.stream));
        add("CUDECOMP_FFT_CHUNKS", self.fft.chunks.to_string());
        add("CUDECOMP_FFT_BACKWARD", self.fft.backward.name().to_owned());
        f
    }
}

/// A setting's value for messages: `unset`, or the value.
fn shown<T: std::fmt::Debug>(v: &Option<T>) -> String {
    match v {
        None => "unset".to_owned(),
        Some(x) => format!("{x:?}"),
    }
}

/// `CUDECOMP_MPI_LIB`: the MPI library a Rust program's `MpiSession::init` opens (read
/// before any handle exists).
pub(crate) fn mpi_library() -> Option<String> {
    var("CUDECOMP_MPI_LIB")
}

/// Whether an MPICH-family launcher started this process (it sets `PMI_RANK`; Open MPI's
/// sets `OMPI_COMM_WORLD_SIZE`): which MPI library a Rust program tries first.
pub(crate) fn mpich_launcher() -> bool {
    std::env::var_os("PMI_RANK").is_some() && std::env::var_os("OMPI_COMM_WORLD_SIZE").is_none()
}

/// NVSHMEM's own `NVSHMEM_BOOTSTRAP_UID_SOCK_IFNAME` (the interface its unique-id
/// bootstrap uses), set to `ifname` unless the user set it: NVSHMEM reads it when its
/// runtime starts.
pub(crate) fn default_nvshmem_bootstrap_interface(ifname: &str) {
    if std::env::var_os("NVSHMEM_BOOTSTRAP_UID_SOCK_IFNAME").is_none() {
        std::env::set_var("NVSHMEM_BOOTSTRAP_UID_SOCK_IFNAME", ifname);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn of(pairs: &[(&str, &str)]) -> Result<Settings> {
        let table: Vec<(String, String)> = pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        Settings::from_lookup(&move |name: &str| {
            table
                .iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.clone())
        })
    }

    #[test]
    fn nothing_set_gives_the_defaults() {
        assert_eq!(of(&[]).unwrap(), Settings::default());
    }

    #[test]
    fn values_are_parsed() {
        let s = of(&[
            ("CUDECOMP_CHECK_COLLECTIVES", "1"),
            ("CUDECOMP_PIPELINE_SLICE_BYTES", "4096"),
            ("CUDECOMP_SINGLE_COPY", "0"),
            ("CUDECOMP_SHARED_ARRAY_MIN_BYTES", "0"),
            ("CUDECOMP_FFT_BACKWARD", "planes"),
            ("CUDECOMP_AUTOTUNE_TRANSPOSE_BACKENDS", "^NCCL,MPI_A2A"),
            ("CUDECOMP_ENABLE_PERFORMANCE_REPORT", "1"),
            ("CUDECOMP_PERFORMANCE_REPORT_SAMPLES", "7"),
        ])
        .unwrap();
        assert!(s.check_collectives);
        assert_eq!(s.pipeline_slice_bytes, Some(4096));
        assert_eq!(s.single_copy, SingleCopy::Never);
        assert_eq!(s.shared_array_min_bytes, 0);
        assert_eq!(s.fft.backward, FftBackward::Planes);
        let f = s.autotune.transpose_backends.unwrap();
        assert!(f.exclude && !f.keeps("NCCL") && f.keeps("MPI_P2P"));
        assert_eq!(s.perf.map(|p| p.samples), Some(7));
    }

    #[test]
    fn every_bad_value_names_its_variable() {
        for (name, value) in [
            ("CUDECOMP_CHECK_COLLECTIVES", "yes"),
            ("CUDECOMP_PIPELINE_SLICE_BYTES", "0"),
            ("CUDECOMP_SINGLE_COPY", "yes"),
            ("CUDECOMP_SINGLE_COPY_BLOCK_BYTES", "-1"),
            ("CUDECOMP_SHARED_ARRAY_MIN_BYTES", "abc"),
            ("CUDECOMP_SHARED_ARRAY_MIN_BYTES", "-1"),
            ("CUDECOMP_HOST_THREADS", "four"),
            ("CUDECOMP_HOST_STREAMING", "off"),
            ("CUDECOMP_BACKGROUND_SM_PERCENT", "120"),
            ("CUDECOMP_ENABLE_NCCL_UBR", "no"),
            ("CUDECOMP_MPI_CUDA_AWARE", "2"),
            ("CUDECOMP_USE_COL_MAJOR_RANK_ORDER", "true"),
            ("CUDECOMP_SIMULATE_NODES", "0"),
            ("CUDECOMP_ENABLE_PERFORMANCE_REPORT", "on"),
            ("CUDECOMP_AUTOTUNE_HALO_BACKENDS", "MPI,FAST"),
            ("CUDECOMP_AUTOTUNE_P_ROW_RANGE", "4,2"),
            ("CUDECOMP_FFT_STREAM", "sometimes"),
            ("CUDECOMP_FFT_CHUNKS", "0"),
            ("CUDECOMP_FFT_BACKWARD", "columns"),
        ] {
            let e = of(&[(name, value)]).expect_err(name);
            assert!(matches!(e, Error::InvalidUsage(_)), "{name}: {e}");
            let m = e.to_string();
            assert!(m.contains(name) && m.contains(value), "{m}");
        }
        let e = of(&[
            ("CUDECOMP_ENABLE_PERFORMANCE_REPORT", "1"),
            ("CUDECOMP_PERFORMANCE_REPORT_DETAIL", "3"),
        ])
        .expect_err("detail 3");
        assert!(
            e.to_string().contains("CUDECOMP_PERFORMANCE_REPORT_DETAIL"),
            "{e}"
        );
    }

    #[test]
    fn per_rank_settings_are_not_agreed() {
        let a = of(&[("CUDECOMP_NODE_ID", "a"), ("CUDECOMP_HOST_THREADS", "2")]).unwrap();
        let b = of(&[("CUDECOMP_NODE_ID", "b"), ("CUDECOMP_HOST_THREADS", "3")]).unwrap();
        assert_eq!(a.agreed_fields(), b.agreed_fields());
        let c = of(&[("CUDECOMP_PIPELINE_SLICE_BYTES", "64")]).unwrap();
        assert_ne!(a.agreed_fields(), c.agreed_fields());
    }
}
