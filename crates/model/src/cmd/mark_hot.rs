//! `mark_hot`/`unmark_hot`: a shop's hot mark set by hand (`markHot()`, the CLI's `hot`)
//! and removed (`unmarkHot()`, `unhot`): plain commands, no script.

/// The command that marks a shop hot (`key` = [`crate::Keys::hot_flag`]) for
/// `ttl_seconds`, as `markHot()` and the CLI's `hot` send it.
pub fn mark_hot_command(key: &[u8], ttl_seconds: i64) -> Vec<Vec<u8>> {
    vec![
        b"SET".to_vec(),
        key.to_vec(),
        b"1".to_vec(),
        b"EX".to_vec(),
        ttl_seconds.to_string().into_bytes(),
    ]
}

/// The command that ends a hot mark (manual or automatic); it answers how many keys it
/// removed (1: there was one).
pub fn unmark_hot_command(key: &[u8]) -> Vec<Vec<u8>> {
    vec![b"DEL".to_vec(), key.to_vec()]
}
