//! A php-fpm pool's own settings, read back by a worker that loaded the extension per pool
//! (`php_admin_value[extension]`), to name the settings php-fpm refused.
//!
//! php-fpm keeps a pool's `php_value`/`php_flag` lines and its `php_admin_value`/
//! `php_admin_flag` lines in two lists, each last line first, and in each new worker
//! applies the first list, then the second (`fpm_php_apply_defines`). An `extension` line
//! loads the extension right there; a setting of an extension not loaded yet is refused
//! ("Unable to set php_admin_value", said on the worker's stderr, which reaches php-fpm's
//! log only with `catch_workers_output`). So a `checkout_guard.*` line written *after*
//! `php_admin_value[extension]` in the pool is applied before the extension is loaded and
//! refused; one written before it is applied after, and is in force.
//!
//! This reads the pool's lines from php-fpm's configuration (its `include`s too) and says
//! which were refused. Off the hot path: once, when a worker loads the extension.

use std::path::{Path, PathBuf};

/// One `php_value[NAME] = VALUE` line of a pool (or `php_flag`, `php_admin_value`,
/// `php_admin_flag`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolLine {
    /// `php_value`, `php_flag`, `php_admin_value` or `php_admin_flag`.
    pub directive: String,
    pub name: String,
    pub value: String,
}

impl PoolLine {
    /// As written in the pool: `php_admin_value[checkout_guard.url]`.
    pub fn spelled(&self) -> String {
        format!("{}[{}]", self.directive, self.name)
    }

    fn is_admin(&self) -> bool {
        self.directive.starts_with("php_admin_")
    }
}

/// Includes nested deeper than this are not followed (php-fpm's own limit is lower).
const MAX_DEPTH: usize = 8;
/// At most this many files are read.
const MAX_FILES: usize = 256;

/// The `php_*` lines of the pool named `pool`, in the order php-fpm reads them, from the
/// configuration file `config` and the files it includes (`include = GLOB`, a relative
/// one taken from `prefix`). Files that cannot be read are skipped.
pub fn pool_lines(config: &Path, prefix: &Path, pool: &str) -> Vec<PoolLine> {
    let mut out = Vec::new();
    let mut files = 0;
    let mut section = String::new();
    read_file(config, prefix, pool, 0, &mut files, &mut section, &mut out);
    out
}

fn read_file(
    path: &Path,
    prefix: &Path,
    pool: &str,
    depth: usize,
    files: &mut usize,
    section: &mut String,
    out: &mut Vec<PoolLine>,
) {
    if depth > MAX_DEPTH || *files >= MAX_FILES {
        return;
    }
    *files += 1;
    let Ok(text) = std::fs::read_to_string(path) else {
        return;
    };
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with(';') || line.starts_with('#') {
            continue;
        }
        if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            *section = name.trim().to_string();
            continue;
        }
        let Some((key, value)) = line.split_once('=') else {
            continue;
        };
        let (key, value) = (key.trim(), unquote(value));
        if key == "include" {
            let pattern = if Path::new(&value).is_absolute() {
                PathBuf::from(&value)
            } else {
                prefix.join(&value)
            };
            for file in glob(&pattern) {
                read_file(&file, prefix, pool, depth + 1, files, section, out);
            }
            continue;
        }
        if section != pool {
            continue;
        }
        let Some((directive, name)) = key.strip_suffix(']').and_then(|k| k.split_once('[')) else {
            continue;
        };
        let directive = directive.trim();
        if matches!(
            directive,
            "php_value" | "php_flag" | "php_admin_value" | "php_admin_flag"
        ) {
            out.push(PoolLine {
                directive: directive.to_string(),
                name: name.trim().to_string(),
                value,
            });
        }
    }
}

/// An INI value without its comment and quotes.
fn unquote(value: &str) -> String {
    let v = value.trim();
    for q in ['"', '\''] {
        if let Some(rest) = v.strip_prefix(q) {
            if let Some(end) = rest.find(q) {
                return rest[..end].to_string();
            }
        }
    }
    v.split(';').next().unwrap_or("").trim().to_string()
}

/// The files matching `pattern`, sorted; `*` and `?` in its last component only (as
/// php-fpm's includes are written: `pool.d/*.conf`).
fn glob(pattern: &Path) -> Vec<PathBuf> {
    let name = pattern
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    if !name.contains(['*', '?']) {
        return vec![pattern.to_path_buf()];
    }
    let dir = pattern.parent().unwrap_or(Path::new("/"));
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut found: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .filter(|e| wildcard(name.as_bytes(), e.file_name().to_string_lossy().as_bytes()))
        .map(|e| e.path())
        .filter(|p| p.is_file())
        .collect();
    found.sort();
    found
}

fn wildcard(p: &[u8], s: &[u8]) -> bool {
    match (p.first(), s.first()) {
        (None, None) => true,
        (Some(b'*'), _) => wildcard(&p[1..], s) || (!s.is_empty() && wildcard(p, &s[1..])),
        (Some(b'?'), Some(_)) => wildcard(&p[1..], &s[1..]),
        (Some(a), Some(b)) if a == b => wildcard(&p[1..], &s[1..]),
        _ => false,
    }
}

/// The lines of settings starting with `setting_prefix` that php-fpm applies before the
/// `extension` line `is_ours` recognises, and so refuses. Empty when the pool does not
/// load the extension.
pub fn refused<'a>(
    lines: &'a [PoolLine],
    is_ours: impl Fn(&str) -> bool,
    setting_prefix: &str,
) -> Vec<&'a PoolLine> {
    // The order php-fpm applies them: php_value/php_flag last to first, then
    // php_admin_value/php_admin_flag last to first.
    let applied: Vec<&PoolLine> = lines
        .iter()
        .filter(|l| !l.is_admin())
        .rev()
        .chain(lines.iter().filter(|l| l.is_admin()).rev())
        .collect();
    let Some(load) = applied
        .iter()
        .position(|l| l.name == "extension" && is_ours(&l.value))
    else {
        return Vec::new();
    };
    let mut out: Vec<&PoolLine> = applied[..load]
        .iter()
        .copied()
        .filter(|l| l.name.starts_with(setting_prefix))
        .collect();
    // In the order they are written.
    out.reverse();
    out.sort_by_key(|l| !l.is_admin());
    out
}

/// `checkout_guard` for `/usr/lib/php/20220829/libcheckout_guard.so`, `checkout_guard.so`
/// or `checkout_guard`: an extension file's name as `extension=` may give it.
pub fn extension_stem(value: &str) -> &str {
    let base = value.rsplit('/').next().unwrap_or(value);
    let base = base.strip_suffix(".so").unwrap_or(base);
    base.strip_prefix("lib").unwrap_or(base)
}

/// The configuration file a php-fpm master names in its process title
/// (`php-fpm: master process (/etc/php/8.2/fpm/php-fpm.conf)`), from its
/// `/proc/PID/cmdline`; a relative one is taken from the master's working directory.
pub fn master_config(master: u32) -> Option<PathBuf> {
    let cmdline = std::fs::read(format!("/proc/{master}/cmdline")).ok()?;
    let title = String::from_utf8_lossy(&cmdline);
    let start = title.find("master process (")? + "master process (".len();
    let end = start + title[start..].rfind(')')?;
    let path = PathBuf::from(&title[start..end]);
    if path.is_absolute() {
        return Some(path);
    }
    let cwd = std::fs::read_link(format!("/proc/{master}/cwd")).ok()?;
    Some(cwd.join(path))
}

/// This worker's pool, from its process title (`php-fpm: pool www`).
pub fn own_pool() -> Option<String> {
    let cmdline = std::fs::read("/proc/self/cmdline").ok()?;
    let title = String::from_utf8_lossy(&cmdline);
    let start = title.find("pool ")? + "pool ".len();
    let name = title[start..].trim_end_matches(['\0', ' ']);
    let name = name.split('\0').next().unwrap_or(name).trim();
    (!name.is_empty()).then(|| name.to_string())
}

/// The warning for the settings php-fpm refused in this worker's pool, if any: read from
/// the configuration of the php-fpm master `master`. `own_stem` is this extension's file
/// name (see [`extension_stem`]).
pub fn refused_warning(master: u32, own_stem: &str) -> Option<String> {
    let config = master_config(master)?;
    let pool = own_pool()?;
    // Relative includes are taken from php-fpm's prefix: its configuration's directory's
    // parent for the usual layouts (`/usr/local/etc/php-fpm.conf` with `include =
    // etc/php-fpm.d/*.conf`), or that directory.
    let dir = config.parent().unwrap_or(Path::new("/"));
    let prefix = dir.parent().unwrap_or(dir);
    let mut lines = pool_lines(&config, prefix, &pool);
    if lines.is_empty() {
        lines = pool_lines(&config, dir, &pool);
    }
    let is_ours = |v: &str| {
        let stem = extension_stem(v);
        stem == own_stem || stem == "checkout_guard"
    };
    let refused = refused(&lines, is_ours, "checkout_guard.");
    warning(&pool, &config, &refused)
}

/// The text of the warning naming the refused lines; `None` when there are none.
pub fn warning(pool: &str, config: &Path, refused: &[&PoolLine]) -> Option<String> {
    if refused.is_empty() {
        return None;
    }
    let names: Vec<String> = refused.iter().map(|l| l.spelled()).collect();
    let extension = if refused.iter().all(|l| l.is_admin()) {
        "php_admin_value[extension]"
    } else {
        "the extension line"
    };
    Some(format!(
        "PHP Warning:  checkout_guard: php-fpm pool '{pool}' ({}): {} not applied: php-fpm \
         applies a pool's lines last to first, so these, written after \
         {extension}, came before the extension was loaded and were refused; their \
         defaults are in force in this pool. Write them before {extension}, or set them \
         in php.ini",
        config.display(),
        names.join(", "),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(d: &str, n: &str, v: &str) -> PoolLine {
        PoolLine {
            directive: d.into(),
            name: n.into(),
            value: v.into(),
        }
    }

    fn ours(v: &str) -> bool {
        extension_stem(v) == "checkout_guard"
    }

    #[test]
    fn settings_after_the_extension_line_are_refused_before_it_are_not() {
        let lines = [
            line("php_admin_value", "checkout_guard.url", "redis://a"),
            line("php_admin_value", "extension", "/x/libcheckout_guard.so"),
            line("php_admin_value", "checkout_guard.events.sinks", "jsonl"),
            line("php_admin_value", "error_log", "/tmp/x"),
            line("php_admin_flag", "checkout_guard.local_denials", "off"),
        ];
        let names: Vec<String> = refused(&lines, ours, "checkout_guard.")
            .iter()
            .map(|l| l.spelled())
            .collect();
        assert_eq!(
            names,
            [
                "php_admin_value[checkout_guard.events.sinks]",
                "php_admin_flag[checkout_guard.local_denials]"
            ]
        );
    }

    #[test]
    fn php_values_come_before_every_admin_value() {
        // php_value lines are applied before the php_admin_value list: all refused when the
        // extension is loaded by php_admin_value, none when by php_value first in order.
        let lines = [
            line("php_value", "checkout_guard.timeout_ms", "50"),
            line("php_admin_value", "extension", "checkout_guard.so"),
        ];
        assert_eq!(refused(&lines, ours, "checkout_guard.").len(), 1);
        let lines = [
            line("php_admin_value", "checkout_guard.url", "redis://a"),
            line("php_value", "extension", "checkout_guard"),
        ];
        assert!(refused(&lines, ours, "checkout_guard.").is_empty());
    }

    #[test]
    fn no_extension_line_nothing_refused() {
        let lines = [line("php_admin_value", "checkout_guard.url", "redis://a")];
        assert!(refused(&lines, ours, "checkout_guard.").is_empty());
        let lines = [
            line("php_admin_value", "extension", "redis.so"),
            line("php_admin_value", "checkout_guard.url", "redis://a"),
        ];
        assert!(refused(&lines, ours, "checkout_guard.").is_empty());
    }

    #[test]
    fn reads_the_pool_through_includes() {
        let dir = std::env::temp_dir().join(format!("cg-fpm-pool-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("etc/pool.d")).unwrap();
        std::fs::write(
            dir.join("etc/php-fpm.conf"),
            "[global]\nerror_log = x.log ; comment\ninclude = etc/pool.d/*.conf\n",
        )
        .unwrap();
        std::fs::write(
            dir.join("etc/pool.d/a.conf"),
            "[other]\nphp_admin_value[checkout_guard.url] = redis://other\n",
        )
        .unwrap();
        std::fs::write(
            dir.join("etc/pool.d/b.conf"),
            "[www]\n; php_admin_value[checkout_guard.timeout_ms] = 1\n\
             php_admin_value[extension] = \"/usr/lib/php/libcheckout_guard.so\"\n\
             php_admin_value[checkout_guard.url] = 'redis://www:1'\n",
        )
        .unwrap();
        std::fs::write(
            dir.join("etc/pool.d/b.conf.bak"),
            "[www]\nphp_value[x] = 1\n",
        )
        .unwrap();
        let lines = pool_lines(&dir.join("etc/php-fpm.conf"), &dir, "www");
        assert_eq!(
            lines,
            [
                line(
                    "php_admin_value",
                    "extension",
                    "/usr/lib/php/libcheckout_guard.so"
                ),
                line("php_admin_value", "checkout_guard.url", "redis://www:1"),
            ]
        );
        let refused = refused(&lines, ours, "checkout_guard.");
        let w = warning("www", Path::new("/etc/php-fpm.conf"), &refused).unwrap();
        assert!(
            w.contains("php_admin_value[checkout_guard.url] not applied"),
            "{w}"
        );
        assert!(w.contains("before php_admin_value[extension]"), "{w}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn extension_stems() {
        assert_eq!(
            extension_stem("/usr/lib/php/x/libcheckout_guard.so"),
            "checkout_guard"
        );
        assert_eq!(extension_stem("checkout_guard.so"), "checkout_guard");
        assert_eq!(extension_stem("checkout_guard"), "checkout_guard");
    }
}
