//! Positioned file I/O of one rank's owned cells of a field stored in a file as the global
//! array `[z][y][x]` (C order, X fastest): [`FilePart`] says where each run of its rows
//! lies in the rank's array and in the file, for arrays that keep X fastest, then Y,
//! then Z, and own whole X rows (X-pencils of the default layout, Z slabs, boxes of whole
//! rows). Each rank then writes (reads) its runs into a file that exists already:
//! straight from host memory where its rows are contiguous, through a staging buffer
//! where halos or padding separate them, and from device memory through two page-locked
//! buffers in turn, so that the copy of one piece overlaps the file I/O of the other and
//! no host copy of the whole array is ever made. Reads use `pread`. Writes go through a
//! [`Sink`]: `pwrite`, or, where several ranks write one file from host memory, a shared
//! mapping of the rank's range of the file, its blocks allocated first, that the bytes are
//! copied into (ranks writing one file through `pwrite` take turns on the file's lock in
//! local file systems; page faults into a mapping do not). Which rank owns which cells,
//! and the file's metadata, are the caller's.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::os::unix::io::AsRawFd;
use std::path::Path;

use crate::cuda::{self, Event, PinnedAlloc, Stream, Way};
use crate::engine::Exec;
use crate::geometry::PencilInfo;
use crate::handle::Handle;
use crate::mem::Buf;
use crate::plan::Layout;
use crate::settings::IoWrite;
use crate::{invalid, Error, Result};

/// Bytes of each piece of file I/O (and of each page-locked buffer): large enough for
/// sequential file I/O to run at speed, small enough to overlap the copies.
const PIECE_BYTES: usize = 64 << 20;

/// Rows of one rank's cells that are consecutive in the file: `rows` rows of `row` bytes
/// from byte `file` of the dataset, `pitch` bytes apart in the array from byte `mem`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Run {
    file: u64,
    mem: usize,
    row: usize,
    pitch: usize,
    rows: usize,
}

/// Where one rank's owned cells of a field lie in its array and in the file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FilePart {
    runs: Vec<Run>,
    /// Bytes of the rank's array (halos and padding included).
    array_bytes: usize,
}

impl FilePart {
    /// The part of an array described by `info` (elements of `elem` bytes) in a field of
    /// `gdims`, or `None` unless the array keeps X fastest, then Y, then Z, and owns
    /// whole X rows (then a redistribution into such a layout comes first).
    pub fn of(info: &PencilInfo, gdims: [i64; 3], elem: usize) -> Option<FilePart> {
        let b = info.interior();
        let whole_rows = b.lo[0] == 0 && b.len[0] == gdims[0];
        if info.order != [0, 1, 2] || !(whole_rows || b.volume() == 0) {
            return None;
        }
        let array_bytes = usize::try_from(info.size).ok()?.checked_mul(elem)?;
        if b.volume() == 0 {
            return Some(FilePart {
                runs: Vec::new(),
                array_bytes,
            });
        }
        let l = Layout::of_pencil(info);
        let e = elem as i64;
        let (row, pitch) = (gdims[0] * e, l.strides[1] * e);
        let whole_planes = b.lo[1] == 0 && b.len[1] == gdims[1] && pitch == row;
        let mut runs: Vec<Run> = Vec::new();
        for z in b.lo[2]..b.lo[2] + b.len[2] {
            let file = ((z * gdims[1] + b.lo[1]) * gdims[0] * e) as u64;
            let mem = (l.offset([0, b.lo[1], z]) * e) as usize;
            let run = Run {
                file,
                mem,
                row: row as usize,
                pitch: pitch as usize,
                rows: b.len[1] as usize,
            };
            match runs.last_mut() {
                // Whole planes stored back to back: one run for all of them.
                Some(last)
                    if whole_planes
                        && last.mem + last.rows * last.pitch == mem
                        && last.file + (last.rows * last.row) as u64 == file =>
                {
                    last.rows += run.rows;
                }
                _ => runs.push(run),
            }
        }
        Some(FilePart { runs, array_bytes })
    }

    /// The pieces of I/O, each at most [`PIECE_BYTES`] of whole rows of one run:
    /// `(run, first row, rows)`.
    fn pieces(&self) -> Vec<(Run, usize, usize)> {
        let mut out = Vec::new();
        for r in &self.runs {
            let per = (PIECE_BYTES / r.row.max(1)).max(1);
            let mut first = 0;
            while first < r.rows {
                let n = per.min(r.rows - first);
                out.push((*r, first, n));
                first += n;
            }
        }
        out
    }
}

fn io_error(what: &str, path: &Path, e: std::io::Error) -> Error {
    Error::Io(format!("{what} {}: {e}", path.display()))
}

fn open(path: &Path, write: bool) -> Result<File> {
    OpenOptions::new()
        .read(true)
        .write(write)
        .open(path)
        .map_err(|e| io_error("open", path, e))
}

/// A shared, writable mapping of bytes `start..start + len` of a file, unmapped on drop.
struct Mapping {
    base: *mut u8,
    len: usize,
    start: u64,
}

impl Mapping {
    /// The pages holding bytes `lo..hi` of `file`, their blocks allocated first; `Ok(None)`
    /// where the file is shorter (touching a mapping past its end raises a signal), the
    /// file system cannot allocate ahead, or the system refuses the mapping; an error
    /// where the allocation fails (a full disk).
    fn of(file: &File, path: &Path, lo: u64, hi: u64) -> Result<Option<Mapping>> {
        let size = file
            .metadata()
            .map_err(|e| io_error("stat", path, e))?
            .len();
        // SAFETY: sysconf has no preconditions.
        let page = u64::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap_or(0);
        if hi <= lo || size < hi || page == 0 {
            return Ok(None);
        }
        let start = lo / page * page;
        let Ok(len) = usize::try_from(hi - start) else {
            return Ok(None);
        };
        if !allocate(file, path, start, hi - start)? {
            return Ok(None);
        }
        Ok(Mapping::map(file, start, len))
    }

    /// A fresh shared mapping of `len` bytes of `file` from byte `start` (page-aligned).
    fn map(file: &File, start: u64, len: usize) -> Option<Mapping> {
        // SAFETY: a fresh mapping of a file open for reading and writing; the kernel picks
        // the address, and the range lies inside the file (checked above).
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                libc::off_t::try_from(start).ok()?,
            )
        };
        if base == libc::MAP_FAILED {
            return None;
        }
        // Fault the pages in writable in one call where the kernel can (Linux 5.14+), not
        // one fault per page; older kernels refuse and the copies fault them in.
        const MADV_POPULATE_WRITE: libc::c_int = 23;
        // SAFETY: advice on the mapping just made, of its own length.
        let _ = unsafe { libc::madvise(base, len, MADV_POPULATE_WRITE) };
        Some(Mapping {
            base: base.cast(),
            len,
            start,
        })
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly the mapping `of` made, once; nothing refers into it after.
        unsafe { libc::munmap(self.base.cast(), self.len) };
    }
}

/// Where a rank's written pieces go: positioned writes, or a mapping of its range of the
/// file.
enum Sink<'a> {
    Positioned { file: &'a File, path: &'a Path },
    Mapped(Mapping),
}

impl Sink<'_> {
    /// The sink for the pieces of `part` at byte `offset` of `file`: mapped where asked
    /// for (`mapped`) and possible, positioned otherwise.
    fn of<'a>(
        file: &'a File,
        path: &'a Path,
        offset: u64,
        pieces: &[(Run, usize, usize)],
        mapped: bool,
    ) -> Result<Sink<'a>> {
        let ends = pieces.iter().map(|&(r, first, rows)| {
            let (at, _, len) = place(offset, &r, first, rows);
            (at, at + len as u64)
        });
        let (lo, hi) = ends.fold((u64::MAX, 0), |(lo, hi), (a, b)| (lo.min(a), hi.max(b)));
        let mapping = if mapped {
            Mapping::of(file, path, lo, hi)?
        } else {
            None
        };
        Ok(match mapping {
            Some(m) => Sink::Mapped(m),
            None => Sink::Positioned { file, path },
        })
    }

    /// Puts `bytes` at byte `at` of the file.
    fn put(&self, bytes: &[u8], at: u64) -> Result<()> {
        match self {
            Sink::Positioned { file, path } => file
                .write_all_at(bytes, at)
                .map_err(|e| io_error("write", path, e)),
            Sink::Mapped(m) => {
                let inside = at >= m.start && at - m.start + bytes.len() as u64 <= m.len as u64;
                if !inside {
                    return Err(Error::Internal(format!(
                        "file write of {} bytes at {at} outside the mapped bytes {}..{}",
                        bytes.len(),
                        m.start,
                        m.start + m.len as u64
                    )));
                }
                // SAFETY: the destination lies inside the mapping (checked), which outlives
                // the copy; the source is the caller's slice, disjoint from the mapping.
                unsafe {
                    std::ptr::copy_nonoverlapping(
                        bytes.as_ptr(),
                        m.base.add((at - m.start) as usize),
                        bytes.len(),
                    );
                }
                Ok(())
            }
        }
    }
}

/// Allocates the blocks of bytes `start..start + len` of the open file `file` (`path`), so
/// that a full disk fails here, before any byte is written, and the bytes may then go in
/// through a mapping (which could report a full disk only by a signal). `Ok(false)` where
/// the file system cannot allocate ahead; never emulated by writing zeros, which would
/// cost a pass over the range.
fn allocate(file: &File, path: &Path, start: u64, len: u64) -> Result<bool> {
    let (Ok(at), Ok(n)) = (libc::off_t::try_from(start), libc::off_t::try_from(len)) else {
        return Ok(false);
    };
    // SAFETY: fallocate on an open descriptor with checked offsets; no memory is passed.
    if unsafe { libc::fallocate(file.as_raw_fd(), 0, at, n) } == 0 {
        return Ok(true);
    }
    let e = std::io::Error::last_os_error();
    match e.raw_os_error() {
        Some(libc::EOPNOTSUPP | libc::ENOSYS | libc::EINVAL) => Ok(false),
        _ => Err(io_error("allocate", path, e)),
    }
}

/// Byte offset in the file and in the array of row `first` of `r`, and the piece's bytes.
fn place(offset: u64, r: &Run, first: usize, rows: usize) -> (u64, usize, usize) {
    (
        offset + r.file + (first * r.row) as u64,
        r.mem + first * r.pitch,
        rows * r.row,
    )
}

impl Handle {
    /// Writes this rank's cells of `part` from `data` (its array) into the existing file
    /// `path`, whose field starts at byte `offset` (host memory: at once; device memory:
    /// after the work already on the stream). Where the handle's ranks write the file
    /// together from host memory (`CUDECOMP_IO_WRITE=auto`), the bytes go through a
    /// mapping of the rank's range of the file, its blocks allocated first. Returns when
    /// the bytes are in the operating system's hands.
    pub fn write_part(
        &self,
        path: &Path,
        offset: u64,
        part: &FilePart,
        data: Buf,
        exec: Exec,
    ) -> Result<()> {
        self.check_alive()?;
        check_array(part, data)?;
        let file = open(path, true)?;
        let pieces = part.pieces();
        // One writer has no lock to wait for; device memory arrives piece by piece
        // through page-locked buffers, where positioned writes measured faster.
        let mapped =
            self.settings().io_write == IoWrite::Auto && self.nranks() > 1 && exec == Exec::Host;
        let sink = Sink::of(&file, path, offset, &pieces, mapped)?;
        match exec {
            Exec::Host => {
                let mut staging = Vec::new();
                for (r, first, rows) in pieces {
                    let (at, mem, len) = place(offset, &r, first, rows);
                    let bytes: &[u8] = if r.pitch == r.row {
                        // SAFETY: the run lies inside `data` (checked against its size), host
                        // memory the caller lends for the call.
                        unsafe { std::slice::from_raw_parts(data.ptr().add(mem), len) }
                    } else {
                        staging.resize(len, 0);
                        for k in 0..rows {
                            // SAFETY: as above, row by row.
                            let src = unsafe {
                                std::slice::from_raw_parts(data.ptr().add(mem + k * r.pitch), r.row)
                            };
                            staging[k * r.row..(k + 1) * r.row].copy_from_slice(src);
                        }
                        &staging
                    };
                    sink.put(bytes, at)?;
                }
                Ok(())
            }
            Exec::Device(stream) => self.device_write(&sink, offset, &pieces, data, stream),
        }
    }

    /// Reads this rank's cells of `part` from `path` (field at byte `offset`) into `data`;
    /// its other cells (halos, padding) are left as they are. Device memory: the copies
    /// are enqueued on the stream and complete before this returns.
    pub fn read_part(
        &self,
        path: &Path,
        offset: u64,
        part: &FilePart,
        data: Buf,
        exec: Exec,
    ) -> Result<()> {
        self.check_alive()?;
        check_array(part, data)?;
        let file = open(path, false)?;
        let pieces = part.pieces();
        match exec {
            Exec::Host => {
                let mut staging = Vec::new();
                for (r, first, rows) in pieces {
                    let (at, mem, len) = place(offset, &r, first, rows);
                    if r.pitch == r.row {
                        // SAFETY: the run lies inside `data`, writable host memory lent for the call.
                        let bytes =
                            unsafe { std::slice::from_raw_parts_mut(data.ptr().add(mem), len) };
                        file.read_exact_at(bytes, at)
                            .map_err(|e| io_error("read", path, e))?;
                    } else {
                        staging.resize(len, 0);
                        file.read_exact_at(&mut staging, at)
                            .map_err(|e| io_error("read", path, e))?;
                        for k in 0..rows {
                            // SAFETY: as above, row by row.
                            let dst = unsafe {
                                std::slice::from_raw_parts_mut(
                                    data.ptr().add(mem + k * r.pitch),
                                    r.row,
                                )
                            };
                            dst.copy_from_slice(&staging[k * r.row..(k + 1) * r.row]);
                        }
                    }
                }
                Ok(())
            }
            Exec::Device(stream) => self.device_read(&file, path, offset, &pieces, data, stream),
        }
    }

    /// Device → two page-locked buffers in turn → the file: piece `k + 1` is copied down
    /// while piece `k` is written.
    fn device_write(
        &self,
        sink: &Sink<'_>,
        offset: u64,
        pieces: &[(Run, usize, usize)],
        data: Buf,
        stream: Stream,
    ) -> Result<()> {
        let dev = &self.device()?.device;
        dev.bind()?;
        let n = pieces.iter().map(|p| p.2 * p.0.row).max().unwrap_or(0);
        let bufs = [PinnedAlloc::new(dev, n)?, PinnedAlloc::new(dev, n)?];
        let landed = [Event::new(false)?, Event::new(false)?];
        let down = |k: usize| -> Result<()> {
            let (r, first, rows) = pieces[k];
            let (_, mem, _) = place(offset, &r, first, rows);
            // SAFETY: the pinned buffer holds the piece and outlives the copy (every event
            // is waited for before the buffers drop); the rows lie inside `data`, device
            // memory lent for the call.
            unsafe {
                cuda::copy_pitched(
                    bufs[k % 2].ptr(),
                    r.row,
                    data.ptr() as u64 + mem as u64,
                    r.pitch,
                    r.row,
                    rows,
                    Way::ToHost,
                    stream,
                )?;
            }
            landed[k % 2].record(stream)
        };
        let run = || -> Result<()> {
            for k in 0..pieces.len().min(2) {
                down(k)?;
            }
            for (k, &(r, first, rows)) in pieces.iter().enumerate() {
                landed[k % 2].synchronize()?;
                let (at, _, len) = place(offset, &r, first, rows);
                // SAFETY: the copy into this buffer completed (its event was waited for).
                let bytes = unsafe { std::slice::from_raw_parts(bufs[k % 2].ptr(), len) };
                sink.put(bytes, at)?;
                if k + 2 < pieces.len() {
                    down(k + 2)?;
                }
            }
            Ok(())
        };
        settled(run(), stream)
    }

    /// The file → two page-locked buffers in turn → device: piece `k + 1` is read while
    /// piece `k` is copied up.
    fn device_read(
        &self,
        file: &File,
        path: &Path,
        offset: u64,
        pieces: &[(Run, usize, usize)],
        data: Buf,
        stream: Stream,
    ) -> Result<()> {
        let dev = &self.device()?.device;
        dev.bind()?;
        let n = pieces.iter().map(|p| p.2 * p.0.row).max().unwrap_or(0);
        let bufs = [PinnedAlloc::new(dev, n)?, PinnedAlloc::new(dev, n)?];
        let freed = [Event::new(false)?, Event::new(false)?];
        let run = || -> Result<()> {
            for (k, &(r, first, rows)) in pieces.iter().enumerate() {
                if k >= 2 {
                    // The buffer's previous piece has gone up to the device.
                    freed[k % 2].synchronize()?;
                }
                let (at, mem, len) = place(offset, &r, first, rows);
                // SAFETY: nothing reads this buffer now (its last copy completed).
                let bytes = unsafe { std::slice::from_raw_parts_mut(bufs[k % 2].ptr(), len) };
                file.read_exact_at(bytes, at)
                    .map_err(|e| io_error("read", path, e))?;
                // SAFETY: the buffer holds the piece and outlives the copy (waited for below);
                // the rows lie inside `data`, device memory lent for the call.
                unsafe {
                    cuda::copy_pitched(
                        bufs[k % 2].ptr(),
                        r.row,
                        data.ptr() as u64 + mem as u64,
                        r.pitch,
                        r.row,
                        rows,
                        Way::ToDevice,
                        stream,
                    )?;
                }
                freed[k % 2].record(stream)?;
            }
            Ok(())
        };
        settled(run(), stream)
    }
}

/// `result`, once every copy enqueued on `stream` has finished: the page-locked buffers
/// drop on return, and no copy into or out of them may still be running then, also when
/// a step failed part-way. The first error wins.
fn settled(result: Result<()>, stream: Stream) -> Result<()> {
    let drained = cuda::synchronize(stream);
    result.and(drained)
}

/// InvalidUsage unless `data` holds the array `part` was made for.
fn check_array(part: &FilePart, data: Buf) -> Result<()> {
    if data.len() < part.array_bytes {
        invalid!(
            "array: expected at least {} bytes (the layout's array), got {}",
            part.array_bytes,
            data.len()
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::geometry::Box3;

    fn slab(z0: i64, nz: i64) -> PencilInfo {
        PencilInfo::of_box(&Box3 {
            lo: [0, 0, z0],
            len: [4, 3, nz],
        })
    }

    #[test]
    fn slabs_are_one_run_and_halos_split_rows() {
        let p = FilePart::of(&slab(2, 5), [4, 3, 10], 8).unwrap();
        assert_eq!(
            p.runs,
            vec![Run {
                file: 2 * 12 * 8,
                mem: 0,
                row: 32,
                pitch: 32,
                rows: 15
            }]
        );
        // A Y range inside the plane: one run per plane; halos make a pitch.
        let mut info = PencilInfo::of_box(&Box3 {
            lo: [0, 1, 0],
            len: [4, 2, 2],
        });
        info.halo_extents = [1, 0, 0];
        info.shape = [6, 2, 2];
        info.size = 24;
        let p = FilePart::of(&info, [4, 3, 2], 8).unwrap();
        assert_eq!(p.runs.len(), 2);
        assert_eq!((p.runs[0].pitch, p.runs[0].row, p.runs[0].mem), (48, 32, 8));
        assert_eq!(p.runs[1].file, (3 + 1) * 4 * 8);
        // Rows that are not whole X rows need a redistribution first.
        let part = PencilInfo::of_box(&Box3 {
            lo: [1, 0, 0],
            len: [3, 3, 2],
        });
        assert!(FilePart::of(&part, [4, 3, 2], 8).is_none());
        assert_eq!(
            FilePart::of(&PencilInfo::of_box(&Box3::default()), [4, 3, 2], 8)
                .unwrap()
                .pieces(),
            vec![]
        );
    }

    #[test]
    fn pieces_hold_whole_rows_up_to_the_piece_size() {
        let rows = PencilInfo::of_box(&Box3 {
            lo: [0, 0, 0],
            len: [2048, 1, 3000],
        });
        let p = FilePart::of(&rows, [2048, 1, 3000], 16).unwrap();
        let pieces = p.pieces();
        let rows: usize = pieces.iter().map(|x| x.2).sum();
        assert_eq!(rows, 3000);
        assert!(pieces.iter().all(|x| x.2 * x.0.row <= PIECE_BYTES));
    }
}
