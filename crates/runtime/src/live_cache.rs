//! The live limits each limiter is known by in this process. Limiter objects are built
//! per request; what a worker learnt of the stored live limits outlives them, so the next
//! request decides with the newest version at once (see `checkout_guard_config::live`).

use std::collections::HashMap;
use std::sync::Arc;

use crate::sync::Mutex;
use once_cell::sync::Lazy;

use checkout_guard_config::live::LiveLimits;

/// The identity of a limiter's live limits in this process: its URL and name, hashed once
/// when the limiter is built so that a decision looks its limits up without allocating.
pub fn limiter_id(url: &str, name: &str) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    (url, name).hash(&mut h);
    h.finish()
}

/// The newest live limits each limiter (by [`limiter_id`]) is known by in this process.
static KNOWN: Lazy<Mutex<HashMap<u64, Arc<LiveLimits>>>> = Lazy::new(Default::default);

pub fn known(id: u64) -> Option<Arc<LiveLimits>> {
    KNOWN.lock().get(&id).cloned()
}

pub fn remember(id: u64, live: Arc<LiveLimits>) {
    KNOWN.lock().insert(id, live);
}
