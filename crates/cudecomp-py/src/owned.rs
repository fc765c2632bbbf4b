//! What the objects a handle owns (grid descriptors, redistributions) do when a `with`
//! block ends or Python drops them: destroy or release their core object, or warn.

use std::sync::Mutex;

use pyo3::prelude::*;

use crate::errors::warn_resource;

/// Whether `state` still holds its core object.
fn holds<T>(state: &Mutex<Option<T>>) -> bool {
    state.lock().map(|s| s.is_some()).unwrap_or(false)
}

/// `__exit__`: `destroy` (collective) while both the object and its handle live; after
/// the handle's finalize, which released everything it had, only forget the core object.
pub(crate) fn leave<T>(
    state: &Mutex<Option<T>>,
    handle_live: bool,
    destroy: impl FnOnce() -> PyResult<()>,
) -> PyResult<bool> {
    if holds(state) && handle_live {
        destroy()?;
    } else {
        state.lock().unwrap_or_else(|e| e.into_inner()).take();
    }
    Ok(false)
}

/// `Drop`: a `ResourceWarning` (`what` names the class) where a live object of a live
/// handle was never destroyed; destroying is collective, so it cannot happen here.
pub(crate) fn warn_if_leaked<T>(state: &Mutex<Option<T>>, handle_live: bool, what: &str) {
    if holds(state) && handle_live {
        warn_resource(&format!(
            "{what} was garbage-collected without destroy(); call destroy() collectively"
        ));
    }
}
