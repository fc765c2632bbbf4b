//! Advice for the user found while the library sets itself up (a slow configuration that
//! still works), queued here and handed to the user by the bindings (as Python warnings)
//! after the call that found it. Each distinct text is queued once per process.

use std::sync::Mutex;

/// Texts waiting to be handed out, and every text ever queued (each goes out once).
struct Queue {
    pending: Vec<String>,
    seen: Vec<String>,
}

static QUEUE: Mutex<Queue> = Mutex::new(Queue {
    pending: Vec::new(),
    seen: Vec::new(),
});

/// Queues `text` unless it was queued before in this process.
pub fn notice(text: String) {
    let mut q = QUEUE.lock().unwrap_or_else(|e| e.into_inner());
    if !q.seen.contains(&text) {
        q.seen.push(text.clone());
        q.pending.push(text);
    }
}

/// The notices queued since the last call.
pub fn take() -> Vec<String> {
    let mut q = QUEUE.lock().unwrap_or_else(|e| e.into_inner());
    std::mem::take(&mut q.pending)
}

/// Cores this process may run on (its CPU affinity, e.g. an MPI launcher's binding).
pub(crate) fn cores_allowed() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// The advice for a rank that starts NVSHMEM while allowed `cores` CPU cores: `None` from
/// two on. With Open MPI's default one-core binding every backend of the process slows
/// down in many runs: NVSHMEM's proxy thread polls on the core the library's host thread
/// needs (figures: the benchmark record).
pub(crate) fn nvshmem_binding(cores: usize) -> Option<String> {
    (cores < 2).then(|| format!(
        "NVSHMEM started on a rank bound to {cores} CPU core: NVSHMEM's proxy thread polls on the core the library's host thread needs, which can make every transfer of the process (all backends) up to 2.4x slower; give each rank at least two cores (Open MPI: mpirun --bind-to none, or --map-by slot:PE=2; Slurm: --cpus-per-task=2)"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nvshmem_advice_only_for_one_core() {
        let one = nvshmem_binding(1).unwrap_or_default();
        assert!(one.contains("at least two cores") && one.contains("--bind-to none"));
        assert_eq!(nvshmem_binding(2), None);
        assert_eq!(nvshmem_binding(64), None);
    }

    #[test]
    fn each_text_is_handed_out_once() {
        notice("a test notice".into());
        notice("a test notice".into());
        let first = take();
        assert_eq!(first.iter().filter(|t| *t == "a test notice").count(), 1);
        notice("a test notice".into());
        assert!(!take().contains(&"a test notice".to_string()));
    }
}
