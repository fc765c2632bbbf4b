//! The performance report (reference §9): per-configuration samples of total and
//! communication time, printed when a grid is destroyed and optionally written as CSV
//! files with upstream's names and columns.
//!
//! Enabled by `CUDECOMP_ENABLE_PERFORMANCE_REPORT=1`; `CUDECOMP_PERFORMANCE_REPORT_DETAIL`
//! (0 summary, 1 rank 0's samples, 2 every rank's), `..._SAMPLES` (ring length, default 20),
//! `..._WARMUP_SAMPLES` (ignored first samples, default 3) and `..._WRITE_DIR`.

use std::cell::Cell;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::Instant;

use crate::comm::hooked::Hook;
use crate::comm::{allgather_bytes, Communicator};
use crate::config::DataType;
use crate::cuda::{Event, Stream};
use crate::geometry::Grid;
use crate::plan::{Direction, HaloPlan, HaloSpec, TransposePlan};
use crate::settings::PerfSettings;
use crate::Result;

/// What a sample belongs to: the operation and the CSV columns that identify its configuration.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct SampleKey {
    /// `transpose` or `halo`.
    pub kind: &'static str,
    /// Report name (`TransposeXY`, `HaloX`, ...).
    pub operation: String,
    /// The remaining identifying CSV fields, already formatted.
    pub fields: Vec<String>,
}

/// One operation's times and bytes, as the report keeps them per sample.
#[derive(Clone, Copy, Debug, Default)]
struct Timings {
    total_ms: f64,
    comm_ms: f64,
    bytes: f64,
}

/// Every rank's samples by (kind, operation, fields): `(rank, index, total, comm, bytes)`.
type Gathered = BTreeMap<(String, String, String), Vec<(usize, usize, f64, f64, f64)>>;

#[derive(Default)]
struct Series {
    seen: usize,
    ring: Vec<Timings>,
}

/// Samples of one grid descriptor.
pub(crate) struct PerfReport {
    settings: PerfSettings,
    series: Mutex<BTreeMap<SampleKey, Series>>,
}

/// Measures elapsed milliseconds: wall clock on the host, CUDA events on a stream.
pub(crate) enum Clock {
    /// Wall clock, for operations that complete on the host.
    Host,
    /// CUDA events recorded on this stream, for operations enqueued on it.
    Device(Stream),
}

/// A point in time of a [`Clock`].
pub(crate) enum Mark {
    /// The wall-clock instant.
    Host(Instant),
    /// A timing event recorded on the clock's stream.
    Device(Event),
}

impl Clock {
    /// Now.
    pub(crate) fn mark(&self) -> Result<Mark> {
        Ok(match self {
            Clock::Host => Mark::Host(Instant::now()),
            Clock::Device(s) => {
                let e = Event::new(true)?;
                e.record(*s)?;
                Mark::Device(e)
            }
        })
    }

    /// Milliseconds since `m` (a device clock waits for the stream to get there).
    pub(crate) fn since(&self, m: &Mark) -> Result<f64> {
        match (self, m) {
            (Clock::Device(s), Mark::Device(start)) => {
                let end = Event::new(true)?;
                end.record(*s)?;
                end.synchronize()?;
                Ok(f64::from(start.elapsed_ms(&end)?))
            }
            (_, Mark::Host(t0)) => Ok(t0.elapsed().as_secs_f64() * 1e3),
            (Clock::Host, Mark::Device(_)) => Err(crate::Error::Internal(
                "a device mark read by a host clock".into(),
            )),
        }
    }
}

/// A [`Hook`] that adds the time spent in each forwarded call to a communication total.
pub(crate) struct CallTimer<'a> {
    /// What each call is timed with.
    pub(crate) clock: &'a Clock,
    /// Milliseconds spent in calls so far.
    pub(crate) comm_ms: Cell<f64>,
}

impl Hook for CallTimer<'_> {
    fn around<T>(&self, call: impl FnOnce() -> Result<T>) -> Result<T> {
        let m = self.clock.mark()?;
        let r = call()?;
        self.comm_ms.set(self.comm_ms.get() + self.clock.since(&m)?);
        Ok(r)
    }
}

const TRANSPOSE_COLUMNS: &str =
    "operation,dtype,input_halo_extents,output_halo_extents,input_padding,output_padding,inplace,managed,fields";
const HALO_COLUMNS: &str = "operation,dtype,dim,halo_extent,periods,padding,managed,fields";

/// Formats a triple as upstream does in CSV cells (`"[a b c]"` without commas).
pub(crate) fn triple<T: std::fmt::Display>(v: &[T]) -> String {
    let parts: Vec<String> = v.iter().map(|x| x.to_string()).collect();
    format!("[{}]", parts.join(" "))
}

/// Identifies a transpose configuration in the performance report.
pub(crate) fn transpose_key(
    plan: &TransposePlan,
    dtype: DataType,
    in_place: bool,
    fields: i64,
) -> SampleKey {
    SampleKey {
        kind: "transpose",
        operation: plan
            .direction
            .map_or("Redistribute", Direction::report_name)
            .into(),
        fields: vec![
            dtype.short_name().into(),
            triple(&plan.input.halo_extents),
            triple(&plan.output.halo_extents),
            triple(&plan.input.padding),
            triple(&plan.output.padding),
            u8::from(in_place).to_string(),
            "0".into(),
            fields.to_string(),
        ],
    }
}

/// Identifies a halo configuration in the performance report.
pub(crate) fn halo_key(s: &HaloSpec, dtype: DataType, fields: i64) -> SampleKey {
    SampleKey {
        kind: "halo",
        operation: format!("Halo{}", ["X", "Y", "Z"][s.axis]),
        fields: vec![
            dtype.short_name().into(),
            s.dim.to_string(),
            triple(&s.halo),
            triple(&s.periods.map(u8::from)),
            triple(&s.padding),
            "0".into(),
            fields.to_string(),
        ],
    }
}

/// Bytes a transpose moves: the input's interior (the report's bandwidth figure).
pub(crate) fn transpose_bytes(plan: &TransposePlan, elem: usize) -> f64 {
    plan.input.interior().volume() as f64 * elem as f64
}

/// Bytes a halo update moves off-rank: one face per real neighbour.
pub(crate) fn halo_bytes(plan: &HaloPlan, rank: usize, elem: usize) -> f64 {
    let real = plan
        .neighbours
        .iter()
        .flatten()
        .filter(|&&r| r != rank)
        .count();
    plan.face as f64 * elem as f64 * real as f64
}

/// What a report's summary and files say of the object it measured.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Heading {
    /// The summary's section title.
    pub title: String,
    /// `(label, value)` lines of the summary, and of each CSV file's header.
    pub lines: Vec<(String, String)>,
    /// What the CSV files' names carry after the kind and the table.
    pub file_stem: String,
}

impl Heading {
    /// A grid descriptor's: its backends, process grid, global extents and memory order,
    /// as upstream's report gives them.
    pub(crate) fn of_grid(grid: &Grid) -> Heading {
        let order: String = grid
            .orders
            .iter()
            .flatten()
            .map(|d| d.to_string())
            .collect();
        let [gx, gy, gz] = grid.gdims;
        let [pr, pc] = grid.pdims;
        Heading {
            title: "Grid configuration".into(),
            lines: vec![
                (
                    "transpose backend".into(),
                    grid.transpose_backend.display_name().into(),
                ),
                (
                    "halo backend".into(),
                    grid.halo_backend.display_name().into(),
                ),
                ("process grid".into(), format!("{pr} x {pc}")),
                ("global dims".into(), format!("{gx} x {gy} x {gz}")),
                ("memory order".into(), format!("{:?}", grid.orders)),
            ],
            file_stem: format!(
                "tcomm_{}-hcomm_{}-pdims_{pr}x{pc}-gdims_{gx}x{gy}x{gz}-memorder_{order}",
                grid.transpose_backend as i32, grid.halo_backend as i32,
            ),
        }
    }
}

impl PerfReport {
    /// An empty report.
    pub(crate) fn new(settings: PerfSettings) -> PerfReport {
        PerfReport {
            settings,
            series: Mutex::new(BTreeMap::new()),
        }
    }

    /// Adds one sample (kept in a ring of the configured length).
    pub(crate) fn record(&self, key: SampleKey, total_ms: f64, comm_ms: f64, bytes: f64) {
        let mut s = self.series.lock().unwrap_or_else(|e| e.into_inner());
        let series = s.entry(key).or_default();
        series.seen += 1;
        if series.seen <= self.settings.warmup {
            return;
        }
        if series.ring.len() == self.settings.samples {
            series.ring.remove(0);
        }
        series.ring.push(Timings {
            total_ms,
            comm_ms,
            bytes,
        });
    }

    /// Collective: the summary (on rank 0; `None` elsewhere), after writing the CSV files
    /// if asked.
    pub(crate) fn finish(
        &self,
        heading: &Heading,
        comm: &dyn Communicator,
    ) -> Result<Option<String>> {
        let series = self.series.lock().unwrap_or_else(|e| e.into_inner());
        // One line per key and sample: key \t rank \t index \t total \t comm \t bytes.
        let mut mine = String::new();
        for (k, s) in series.iter() {
            for (i, x) in s.ring.iter().enumerate() {
                let _ = writeln!(
                    mine,
                    "{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}",
                    k.kind,
                    k.operation,
                    k.fields.join(","),
                    comm.rank(),
                    i,
                    x.total_ms,
                    x.comm_ms,
                    x.bytes,
                    s.ring.len()
                );
            }
        }
        let all = allgather_bytes(comm, mine.as_bytes())?;
        if comm.rank() != 0 {
            return Ok(None);
        }
        let mut agg: Gathered = BTreeMap::new();
        for text in &all {
            for line in String::from_utf8_lossy(text).lines() {
                let f: Vec<&str> = line.split('\t').collect();
                if f.len() != 9 {
                    continue;
                }
                let num = |i: usize| f[i].parse::<f64>().unwrap_or(f64::NAN);
                agg.entry((f[0].to_string(), f[1].to_string(), f[2].to_string()))
                    .or_default()
                    .push((
                        f[3].parse().unwrap_or(0),
                        f[4].parse().unwrap_or(0),
                        num(5),
                        num(6),
                        num(7),
                    ));
            }
        }
        if let Some(dir) = &self.settings.write_dir {
            self.write_csv(heading, dir, &agg)?;
        }
        Ok(Some(self.summary(heading, &agg)))
    }

    fn means(samples: &[(usize, usize, f64, f64, f64)]) -> (usize, f64, f64, f64) {
        // Mean over each rank's samples, then over ranks.
        let mut per_rank: BTreeMap<usize, Vec<(f64, f64, f64)>> = BTreeMap::new();
        for &(r, _, t, c, b) in samples {
            per_rank.entry(r).or_default().push((t, c, b));
        }
        let n = per_rank.len().max(1) as f64;
        let mut count = 0;
        let (mut t, mut c, mut b) = (0.0, 0.0, 0.0);
        for v in per_rank.values() {
            let k = v.len() as f64;
            count = count.max(v.len());
            t += v.iter().map(|x| x.0).sum::<f64>() / k / n;
            c += v.iter().map(|x| x.1).sum::<f64>() / k / n;
            b += v.iter().map(|x| x.2).sum::<f64>() / k / n;
        }
        (count, t, c, b)
    }

    fn summary(&self, heading: &Heading, agg: &Gathered) -> String {
        let mut out = String::new();
        let _ = writeln!(out, "CUDECOMP: ===== Performance Summary =====");
        let _ = writeln!(out, "CUDECOMP: {}:", heading.title);
        for (label, value) in &heading.lines {
            let _ = writeln!(out, "CUDECOMP:   {label}: {value}");
        }
        let _ = writeln!(
            out,
            "CUDECOMP: averages over up to {} samples per rank after {} warm-up samples, then over ranks",
            self.settings.samples, self.settings.warmup
        );
        for kind in ["transpose", "halo"] {
            let comm = if kind == "transpose" { "A2A" } else { "SR" };
            let rows: Vec<_> = agg.iter().filter(|((k, _, _), _)| k == kind).collect();
            if rows.is_empty() {
                continue;
            }
            let cols = if kind == "transpose" {
                TRANSPOSE_COLUMNS
            } else {
                HALO_COLUMNS
            };
            let _ = writeln!(out, "CUDECOMP: {kind} operations");
            let _ = writeln!(
                out,
                "CUDECOMP:   {cols},samples,total_ms,{comm}_ms,local_ms,{comm}_BW_GBps"
            );
            for ((_, op, fields), v) in rows {
                let (n, t, c, b) = Self::means(v);
                let _ = writeln!(
                    out,
                    "CUDECOMP:   {op},{fields},{n},{t:.3},{c:.3},{:.3},{:.2}",
                    t - c,
                    if c > 0.0 { b * 1e-6 / c } else { 0.0 }
                );
            }
        }
        out
    }

    fn file_name(heading: &Heading, kind: &str, what: &str) -> String {
        format!(
            "cudecomp-perf-report-{kind}-{what}-{}.csv",
            heading.file_stem
        )
    }

    fn write_csv(&self, heading: &Heading, dir: &PathBuf, agg: &Gathered) -> Result<()> {
        let io = |e: std::io::Error| {
            crate::Error::InvalidUsage(format!(
                "CUDECOMP_PERFORMANCE_REPORT_WRITE_DIR {}: {e}",
                dir.display()
            ))
        };
        std::fs::create_dir_all(dir).map_err(io)?;
        let header: String = heading
            .lines
            .iter()
            .map(|(label, value)| format!("# {label}: {value}\n"))
            .collect();
        for kind in ["transpose", "halo"] {
            let rows: Vec<_> = agg.iter().filter(|((k, _, _), _)| k == kind).collect();
            if rows.is_empty() {
                continue;
            }
            let (cols, comm) = if kind == "transpose" {
                (TRANSPOSE_COLUMNS, "A2A")
            } else {
                (HALO_COLUMNS, "SR")
            };
            let mut text =
                format!("{header}{cols},samples,total_ms,{comm}_ms,local_ms,{comm}_BW_GBps\n");
            for ((_, op, fields), v) in &rows {
                let (n, t, c, b) = Self::means(v);
                let bw = if c > 0.0 { b * 1e-6 / c } else { 0.0 };
                let _ = writeln!(text, "{op},{fields},{n},{t},{c},{},{bw}", t - c);
            }
            std::fs::write(dir.join(Self::file_name(heading, kind, "aggregated")), text)
                .map_err(io)?;
            if self.settings.detail > 0 {
                let mut text = format!(
                    "{header}{cols},rank,sample,total_ms,{comm}_ms,local_ms,{comm}_BW_GBps\n"
                );
                for ((_, op, fields), v) in &rows {
                    for &(r, i, t, c, b) in v.iter() {
                        if self.settings.detail == 1 && r != 0 {
                            continue;
                        }
                        let bw = if c > 0.0 { b * 1e-6 / c } else { 0.0 };
                        let _ = writeln!(text, "{op},{fields},{r},{i},{t},{c},{},{bw}", t - c);
                    }
                }
                std::fs::write(dir.join(Self::file_name(heading, kind, "samples")), text)
                    .map_err(io)?;
            }
        }
        Ok(())
    }
}
