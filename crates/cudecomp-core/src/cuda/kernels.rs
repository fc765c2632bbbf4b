//! The copy kernels: CUDA C compiled at run time by NVRTC to CUBIN for the device's
//! architecture (PTX from a newer NVRTC than the driver would not load), once per process
//! and device.
//!
//! One strided 3-D copy serves pack, unpack, local transposes and halo faces: a plain
//! kernel when source and destination share their fastest axis, a shared-memory tiled
//! transpose when they do not. Element sizes 4, 8 and 16 bytes. Both take a batch of
//! fields, the same copy shifted field by field, in the same launch.

use std::collections::HashMap;
use std::ffi::{c_void, CString};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use cudarc::driver::{result as cu, sys};
use cudarc::nvrtc::{result as rtc, sys as rtc_sys};

use super::{check, Device, Stream};
use crate::mem::{check_copy, Buf, FieldSteps, Mover};
use crate::plan::{Copy3, EngineShape, Outer, Rows};
use crate::{Error, Result};

/// CUDA C source of every kernel (no includes: NVRTC has no standard headers).
pub(crate) const SOURCE: &str = r#"
typedef long long i64;
typedef unsigned long long u64;
struct __align__(16) e16 { u64 a, b; };
#define TILE 32

// Axis 0 is the destination's fastest; source and destination share it. Short rows (halo
// faces across the fastest axis, thin chunks) are flattened with axis 1 so that every lane
// of a warp moves a cell instead of one lane in 256/n0. A block's y threads take rows of
// their own (blocks of few rows' width but many threads, for grids capped at few blocks).
// The z blocks walk axis 2 of every field in turn: field f starts f * fs further in the
// source and f * fd in the destination.
template <typename T>
__device__ void copy_plain(const T* __restrict__ src, T* __restrict__ dst,
                           i64 n0, i64 n1, i64 n2,
                           i64 s0, i64 s1, i64 s2, i64 d0, i64 d1, i64 d2,
                           i64 nf, i64 fs, i64 fd) {
    if (n0 < SHORT_ROW) {
        const i64 m = n0 * n1;
        const i64 step = (i64)gridDim.x * gridDim.y * blockDim.x * blockDim.y;
        const i64 first = (((i64)blockIdx.y * gridDim.x + blockIdx.x) * blockDim.y + threadIdx.y)
                          * blockDim.x + threadIdx.x;
        for (i64 kf = blockIdx.z; kf < n2 * nf; kf += gridDim.z) {
            const i64 f = kf / n2, k = kf - f * n2;
            const T* s = src + f * fs + k * s2;
            T* d = dst + f * fd + k * d2;
            for (i64 t = first; t < m; t += step) {
                const i64 j = t / n0, i = t - j * n0;
                d[i * d0 + j * d1] = s[i * s0 + j * s1];
            }
        }
        return;
    }
    for (i64 kf = blockIdx.z; kf < n2 * nf; kf += gridDim.z) {
        const i64 f = kf / n2, k = kf - f * n2;
        const T* s = src + f * fs + k * s2;
        T* d = dst + f * fd + k * d2;
        for (i64 j = (i64)blockIdx.y * blockDim.y + threadIdx.y; j < n1;
             j += (i64)gridDim.y * blockDim.y)
            for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < n0;
                 i += (i64)gridDim.x * blockDim.x)
                d[i * d0 + j * d1] = s[i * s0 + j * s1];
    }
}

// Axis a is the destination's fastest, axis b the source's; c is the third. The z blocks
// walk axis c of every field in turn, as in copy_plain.
template <typename T>
__device__ void copy_tiled(const T* __restrict__ src, T* __restrict__ dst,
                           i64 na, i64 nb, i64 nc,
                           i64 sa, i64 sb, i64 sc, i64 da, i64 db, i64 dc,
                           i64 nf, i64 fs, i64 fd) {
    __shared__ T tile[TILE][TILE + 1];
    const i64 ta_n = (na + TILE - 1) / TILE, tb_n = (nb + TILE - 1) / TILE;
    for (i64 cf = blockIdx.z; cf < nc * nf; cf += gridDim.z) {
        const i64 f = cf / nc, c = cf - f * nc;
        const T* s = src + f * fs + c * sc;
        T* d = dst + f * fd + c * dc;
        for (i64 tb = blockIdx.y; tb < tb_n; tb += gridDim.y)
            for (i64 ta = blockIdx.x; ta < ta_n; ta += gridDim.x) {
                const i64 a0 = ta * TILE, b0 = tb * TILE;
                for (int y = threadIdx.y; y < TILE; y += blockDim.y) {
                    const i64 a = a0 + y, b = b0 + threadIdx.x;
                    if (a < na && b < nb) tile[y][threadIdx.x] = s[a * sa + b * sb];
                }
                __syncthreads();
                for (int y = threadIdx.y; y < TILE; y += blockDim.y) {
                    const i64 a = a0 + threadIdx.x, b = b0 + y;
                    if (a < na && b < nb) d[a * da + b * db] = tile[threadIdx.x][y];
                }
                __syncthreads();
            }
    }
}

#define INSTANTIATE(T, N)                                                              \
extern "C" __global__ void copy_plain_##N(u64 s, u64 d, i64 n0, i64 n1, i64 n2,       \
        i64 s0, i64 s1, i64 s2, i64 d0, i64 d1, i64 d2, i64 nf, i64 fs, i64 fd) {      \
    copy_plain<T>((const T*)s, (T*)d, n0, n1, n2, s0, s1, s2, d0, d1, d2, nf, fs, fd); \
}                                                                                      \
extern "C" __global__ void copy_tiled_##N(u64 s, u64 d, i64 n0, i64 n1, i64 n2,       \
        i64 s0, i64 s1, i64 s2, i64 d0, i64 d1, i64 d2, i64 nf, i64 fs, i64 fd) {      \
    copy_tiled<T>((const T*)s, (T*)d, n0, n1, n2, s0, s1, s2, d0, d1, d2, nf, fs, fd); \
}

INSTANTIATE(unsigned int, 4)
INSTANTIATE(u64, 8)
INSTANTIATE(e16, 16)
"#;

/// Rows (cells along the destination's fastest axis) shorter than this take the kernel's
/// flattened branch (defined for [`SOURCE`] when it is compiled).
const SHORT_ROW: i64 = 128;

/// Kernel names, by element size index (4, 8, 16 bytes).
const PLAIN: [&str; 3] = ["copy_plain_4", "copy_plain_8", "copy_plain_16"];
const TILED: [&str; 3] = ["copy_tiled_4", "copy_tiled_8", "copy_tiled_16"];

fn nvrtc_err(e: cudarc::nvrtc::result::NvrtcError, what: &str) -> Error {
    Error::Cuda(format!("NVRTC {what} failed: {e:?}"))
}

/// Compiles [`SOURCE`] to CUBIN for `sm_<major><minor>`.
pub(crate) fn compile_cubin(arch: (i32, i32)) -> Result<Vec<u8>> {
    if !super::nvrtc_present() {
        return Err(Error::Cuda(
            "NVRTC (libnvrtc.so.13) not found: set CUDECOMP_NVRTC_LIB or install nvidia-cuda-nvrtc"
                .into(),
        ));
    }
    let src = CString::new(format!("#define SHORT_ROW {SHORT_ROW}\n{SOURCE}"))
        .map_err(|e| Error::Internal(e.to_string()))?;
    let prog = rtc::create_program(&src, None).map_err(|e| nvrtc_err(e, "create_program"))?;
    let opts = [
        format!("--gpu-architecture=sm_{}{}", arch.0, arch.1),
        "--std=c++17".to_string(),
    ];
    // SAFETY: `prog` is a live program; the options are NUL-free strings.
    let compiled = unsafe { rtc::compile_program(prog, &opts) };
    let result = match compiled {
        Ok(()) => {
            let mut size = 0usize;
            // SAFETY: the program compiled; the size query writes one usize.
            let r = unsafe { rtc_sys::nvrtcGetCUBINSize(prog, &mut size) };
            let mut cubin = vec![0u8; size];
            // SAFETY: `cubin` has the size NVRTC reported.
            let r2 = unsafe { rtc_sys::nvrtcGetCUBIN(prog, cubin.as_mut_ptr().cast()) };
            if r != rtc_sys::nvrtcResult::NVRTC_SUCCESS || r2 != rtc_sys::nvrtcResult::NVRTC_SUCCESS
            {
                Err(Error::Cuda(format!(
                    "NVRTC could not produce CUBIN for sm_{}{}",
                    arch.0, arch.1
                )))
            } else {
                Ok(cubin)
            }
        }
        Err(e) => {
            // SAFETY: the log is available after a failed compilation.
            let log = unsafe { rtc::get_program_log(prog) }
                .map(|l| l.iter().map(|&c| c as u8 as char).collect::<String>())
                .unwrap_or_default();
            Err(Error::Cuda(format!(
                "NVRTC compilation failed ({e:?}): {log}"
            )))
        }
    };
    // SAFETY: destroyed exactly once.
    let _ = unsafe { rtc::destroy_program(prog) };
    result
}

/// Loaded kernels of one device.
pub(crate) struct Kernels {
    _module: sys::CUmodule,
    plain: [sys::CUfunction; 3],
    tiled: [sys::CUfunction; 3],
    /// Streaming multiprocessors of the device.
    sms: u32,
}

// SAFETY: module and function handles are immutable once loaded and valid in any thread
// that binds the device's context.
unsafe impl Send for Kernels {}
// SAFETY: as above.
unsafe impl Sync for Kernels {}

static CACHE: OnceLock<Mutex<HashMap<i32, Arc<Kernels>>>> = OnceLock::new();

impl Kernels {
    /// The kernels of `device` if they are loaded already.
    pub(crate) fn loaded(device: &Device) -> Option<Arc<Kernels>> {
        let cache = CACHE.get_or_init(|| Mutex::new(HashMap::new()));
        let map = cache.lock().unwrap_or_else(|e| e.into_inner());
        map.get(&device.ordinal).cloned()
    }

    /// The kernels of `device`, compiled and loaded on first use.
    pub(crate) fn for_device(device: &Device) -> Result<Arc<Kernels>> {
        let cache = CACHE.get_or_init(|| Mutex::new(HashMap::new()));
        let mut map = cache.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(k) = map.get(&device.ordinal) {
            return Ok(k.clone());
        }
        device.bind()?;
        let cubin = compile_cubin(device.arch)?;
        // SAFETY: `cubin` is a complete CUBIN image for this device.
        let module = check(
            unsafe { cu::module::load_data(cubin.as_ptr().cast()) },
            "cuModuleLoadData",
        )?;
        let get = |name: &str| -> Result<sys::CUfunction> {
            let n = CString::new(name).map_err(|e| Error::Internal(e.to_string()))?;
            // SAFETY: the module is loaded and defines `name`.
            check(
                unsafe { cu::module::get_function(module, n) },
                "cuModuleGetFunction",
            )
        };
        let k = Arc::new(Kernels {
            _module: module,
            plain: [get(PLAIN[0])?, get(PLAIN[1])?, get(PLAIN[2])?],
            tiled: [get(TILED[0])?, get(TILED[1])?, get(TILED[2])?],
            sms: device.sms.max(2) as u32,
        });
        map.insert(device.ordinal, k.clone());
        Ok(k)
    }
}

/// Enqueues strided copies on one stream.
pub(crate) struct DeviceMover<'a> {
    /// The copy kernels of the current device.
    pub kernels: &'a Kernels,
    /// The stream every copy is enqueued on.
    pub stream: Stream,
    /// Copies run beside NCCL's kernels (see [`Mover::background`]).
    pub background: AtomicBool,
    /// Copies of long contiguous rows go to the copy engine (see [`DeviceMover::rows_on_engine`]).
    pub engine_rows: bool,
    /// Blocks a copy may use while a transfer runs beside it.
    background_blocks: u32,
}

impl<'a> DeviceMover<'a> {
    /// A mover enqueuing on `stream`, running alone.
    pub(crate) fn new(kernels: &'a Kernels, stream: Stream) -> Self {
        DeviceMover {
            kernels,
            stream,
            background: AtomicBool::new(false),
            engine_rows: false,
            background_blocks: (kernels.sms / 2).max(1),
        }
    }

    /// The same mover, whose copies beside a transfer use `percent` of the SMs (1 to 100).
    pub(crate) fn background_share(self, percent: u32) -> Self {
        DeviceMover {
            background_blocks: (self.kernels.sms * percent.clamp(1, 100) / 100).max(1),
            ..self
        }
    }

    /// The same mover, sending every copy whose contiguous rows are at least
    /// [`ENGINE_ROW_BYTES`] long to the copy engine (pitched 2-D and 3-D copies) instead of
    /// a kernel: copies into peers then take no SMs, so kernels the caller runs meanwhile
    /// (FFTs of the next slab) keep the whole GPU, and NVLink is driven by the engine that
    /// reaches its peak (a kernel storing into a peer reaches less of it).
    pub(crate) fn rows_on_engine(mut self) -> Self {
        self.engine_rows = true;
        self
    }
}

/// Shortest contiguous row (bytes) that [`DeviceMover::rows_on_engine`] hands to the copy
/// engine; shorter rows go to kernels, which keep more of them in flight.
pub(crate) const ENGINE_ROW_BYTES: i64 = 4096;

/// Most 2-D copies one engine copy may be issued as (one per plane), beyond which a kernel
/// is cheaper to launch.
const ENGINE_MAX_CALLS: i64 = 64;

/// How a mover with rows on the engine copies `c` (cells of `elem` bytes) there: its rows
/// and their shape, when its rows are at least [`ENGINE_ROW_BYTES`] long and the engine
/// takes them; `None` sends it to a kernel.
pub(crate) fn on_engine(c: &Copy3, elem: usize) -> Option<(Rows, EngineShape)> {
    let r = c
        .rows()
        .filter(|r| r.width * elem as i64 >= ENGINE_ROW_BYTES)?;
    Some((r, r.engine_shape(elem, ENGINE_MAX_CALLS)?))
}

/// Caps a launch grid at `cap` blocks in all (the kernels stride over their whole range).
fn capped(grid: (u32, u32, u32), cap: u32) -> (u32, u32, u32) {
    let x = grid.0.min(cap);
    let y = grid.1.min((cap / x).max(1));
    let z = grid.2.min((cap / (x * y)).max(1));
    (x, y, z)
}

// SAFETY: only used by the thread that runs the operation (the stream and kernel handles
// are plain values; `background` is atomic).
unsafe impl Sync for DeviceMover<'_> {}

impl Mover for DeviceMover<'_> {
    fn background(&self, on: bool) {
        self.background.store(on, Ordering::Relaxed);
    }

    fn copy(&self, elem: usize, src: Buf, dst: Buf, c: &Copy3) -> Result<()> {
        self.copy_fields(elem, src, dst, c, FieldSteps::ONE)
    }

    fn copy_fields(
        &self,
        elem: usize,
        src: Buf,
        dst: Buf,
        c: &Copy3,
        fields: FieldSteps,
    ) -> Result<()> {
        if fields.count < 1 || !check_copy(elem, src, dst, c)? {
            return Ok(());
        }
        // Field offsets grow linearly: the first and the last field bound every other.
        if fields.count > 1 && !check_copy(elem, src, dst, &fields.of(c, fields.count - 1))? {
            return Ok(());
        }
        let (s, d) = (src.ptr() as u64, dst.ptr() as u64);
        if let Some(n) = c.dense_len() {
            // One dense block (fields that continue each other densely are one too) goes to
            // the copy engine rather than a kernel.
            if fields.count == 1 || (fields.src == n && fields.dst == n) {
                // SAFETY: `check_copy` found the first and the last field, hence the whole
                // block between them, inside `src` and `dst`.
                return unsafe { self.copy_dense(elem, src, dst, c, n * fields.count) };
            }
            // Fields each dense are the rows of one pitched engine copy.
            let rows = Rows {
                src_offset: c.src_offset,
                dst_offset: c.dst_offset,
                width: n,
                outer: [
                    Outer {
                        count: fields.count,
                        src_stride: fields.src,
                        dst_stride: fields.dst,
                    },
                    Outer {
                        count: 1,
                        src_stride: n,
                        dst_stride: n,
                    },
                ],
            };
            if let Some(shape) = rows.engine_shape(elem, 1) {
                // SAFETY: as above: every field lies between the first and the last.
                return unsafe { super::copy_rows(d, s, elem, &rows, shape, self.stream) };
            }
        }
        // Copy-engine rows take no SMs and cost no launch: one engine copy per field.
        if let Some((r, shape)) = on_engine(c, elem).filter(|_| self.engine_rows) {
            return (0..fields.count).try_for_each(|f| {
                let r = Rows {
                    src_offset: r.src_offset + f * fields.src,
                    dst_offset: r.dst_offset + f * fields.dst,
                    ..r
                };
                // SAFETY: as above: every cell of every field is inside `src` and `dst`.
                unsafe { super::copy_rows(d, s, elem, &r, shape, self.stream) }
            });
        }
        // SAFETY: as above: every field lies between the first and the last.
        unsafe { self.launch(elem, src, dst, c, fields) }
    }
}

impl DeviceMover<'_> {
    /// Copies the `n` cells of `elem` bytes from `c`'s source offset to its destination
    /// offset on the copy engine.
    ///
    /// # Safety
    /// Both ranges lie inside `src` and `dst`.
    unsafe fn copy_dense(&self, elem: usize, src: Buf, dst: Buf, c: &Copy3, n: i64) -> Result<()> {
        let e = elem as u64;
        let s = src.ptr() as u64 + c.src_offset as u64 * e;
        let d = dst.ptr() as u64 + c.dst_offset as u64 * e;
        // SAFETY: the caller vouches for both ranges, inside buffers whose creators vouch
        // for them for the whole operation (`Buf::new`).
        unsafe { super::copy_device(d, s, n as usize * elem, self.stream) }
    }

    /// Launches one copy kernel for `c` and every field of `fields`.
    ///
    /// # Safety
    /// Every cell of every field lies inside `src` and `dst`.
    unsafe fn launch(
        &self,
        elem: usize,
        src: Buf,
        dst: Buf,
        c: &Copy3,
        fields: FieldSteps,
    ) -> Result<()> {
        let (wide, w) = c.widened(elem, 16, src.ptr() as u64, dst.ptr() as u64);
        // Wider cells only where every field's start stays on one.
        let factor = (wide / elem) as i64;
        let (elem, c, mut fs, mut fd) = if fields.src % factor == 0 && fields.dst % factor == 0 {
            (wide, w, fields.src / factor, fields.dst / factor)
        } else {
            (elem, *c, fields.src, fields.dst)
        };
        let mut nf = fields.count;
        let ext = c.extent;
        let (ax, src_fast) = c.walk_order();
        let inner = ax[0];
        let (order, tiled) = if src_fast == inner {
            (ax, false)
        } else {
            ([inner, src_fast, 3 - inner - src_fast], true)
        };
        let k = match elem {
            4 => 0,
            8 => 1,
            _ => 2,
        };
        let e = elem as u64;
        let mut s_ptr = src.ptr() as u64 + c.src_offset as u64 * e;
        let mut d_ptr = dst.ptr() as u64 + c.dst_offset as u64 * e;
        let mut n: [i64; 3] = order.map(|g| ext[g]);
        let mut ss: [i64; 3] = order.map(|g| c.src_strides[g]);
        let mut ds: [i64; 3] = order.map(|g| c.dst_strides[g]);
        // The z blocks walk the outer axis of every field.
        let outer = (n[2] * nf).clamp(1, 65535) as u32;
        // Beside NCCL, copies keep to half the SMs, in blocks of 1024 threads (256 along the
        // row, 4 rows) to keep enough loads in flight: a copy on all SMs stretches the NCCL
        // exchange beside it far more than it gains (measured; see the benchmark record).
        let background = self.background.load(Ordering::Relaxed);
        let rows: i64 = if background { 4 } else { 1 };
        let (f, grid, block) = if tiled {
            let tiles = |v: i64| ((v + 31) / 32) as u32;
            (
                self.kernels.tiled[k],
                (
                    tiles(n[0]).clamp(1, 1 << 20),
                    tiles(n[1]).clamp(1, 65535),
                    outer,
                ),
                (32, 8, 1),
            )
        } else if n[0] < SHORT_ROW {
            // The kernel's flattened branch: axes 0 and 1 as one.
            (
                self.kernels.plain[k],
                (
                    ((n[0] * n[1] + 256 * rows - 1) / (256 * rows)).clamp(1, 1 << 20) as u32,
                    1,
                    outer,
                ),
                (256, rows as u32, 1),
            )
        } else {
            (
                self.kernels.plain[k],
                (
                    ((n[0] + 255) / 256).clamp(1, 1 << 20) as u32,
                    ((n[1] + rows - 1) / rows).clamp(1, 65535) as u32,
                    outer,
                ),
                (256, rows as u32, 1),
            )
        };
        let grid = if background {
            capped(grid, self.background_blocks)
        } else {
            grid
        };
        let mut params: [*mut c_void; 14] = [
            (&mut s_ptr as *mut u64).cast(),
            (&mut d_ptr as *mut u64).cast(),
            (&mut n[0] as *mut i64).cast(),
            (&mut n[1] as *mut i64).cast(),
            (&mut n[2] as *mut i64).cast(),
            (&mut ss[0] as *mut i64).cast(),
            (&mut ss[1] as *mut i64).cast(),
            (&mut ss[2] as *mut i64).cast(),
            (&mut ds[0] as *mut i64).cast(),
            (&mut ds[1] as *mut i64).cast(),
            (&mut ds[2] as *mut i64).cast(),
            (&mut nf as *mut i64).cast(),
            (&mut fs as *mut i64).cast(),
            (&mut fd as *mut i64).cast(),
        ];
        // SAFETY: the kernel's parameters match `params` (two u64 addresses, twelve i64);
        // every touched element lies inside `src` and `dst` (the caller's promise).
        check(
            unsafe { cu::launch_kernel(f, grid, block, 0, self.stream.0, &mut params) },
            "cuLaunchKernel",
        )
    }
}

#[cfg(test)]
mod tests {
    use super::capped;

    #[test]
    fn capped_grids_stay_within_the_cap() {
        for (grid, cap) in [
            ((1 << 20, 65535, 65535), 66),
            ((2, 512, 1024), 66),
            ((1, 1, 5000), 66),
            ((3, 1, 1), 66),
            ((200, 200, 1), 1),
        ] {
            let c = capped(grid, cap);
            assert!(c.0 * c.1 * c.2 <= cap.max(1), "{grid:?} -> {c:?}");
            assert!(c.0 >= 1 && c.1 >= 1 && c.2 >= 1);
            assert!(c.0 <= grid.0 && c.1 <= grid.1 && c.2 <= grid.2);
        }
        assert_eq!(capped((2, 512, 1024), 66), (2, 33, 1));
        assert_eq!(capped((3, 1, 1), 66), (3, 1, 1));
    }
}
