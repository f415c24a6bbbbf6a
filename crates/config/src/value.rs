//! A PHP-like value tree: what the extension turns a PHP options array into before the
//! option parsers validate it. Keeping validation on this type lets it be tested without PHP.

use checkout_guard_model::ConfigError;

/// A value as PHP would hand it over: scalars, lists (arrays with keys 0..n) and maps.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Null,
    Bool(bool),
    Int(i64),
    Float(f64),
    /// PHP strings are byte strings; they need not be UTF-8.
    Str(Vec<u8>),
    List(Vec<Value>),
    /// Key/value pairs in PHP's order. Integer keys are given as their decimal string.
    Map(Vec<(String, Value)>),
    /// Anything else (an object, a resource, a closure), by its PHP type name.
    Other(String),
}

impl Value {
    /// A PHP-ish type name for error messages.
    pub fn type_name(&self) -> &str {
        match self {
            Value::Null => "null",
            Value::Bool(_) => "bool",
            Value::Int(_) => "int",
            Value::Float(_) => "float",
            Value::Str(_) => "string",
            Value::List(_) | Value::Map(_) => "array",
            Value::Other(t) => t,
        }
    }

    /// A short rendering of the value for error messages (strings are cut and escaped).
    pub fn describe(&self) -> String {
        match self {
            Value::Null => "null".into(),
            Value::Bool(b) => b.to_string(),
            Value::Int(i) => i.to_string(),
            Value::Float(f) => format!("{f:?}"),
            Value::Str(s) => quote_bytes(s),
            Value::List(_) | Value::Map(_) => "array".into(),
            Value::Other(t) => t.clone(),
        }
    }
}

impl From<&str> for Value {
    fn from(s: &str) -> Self {
        Value::Str(s.as_bytes().to_vec())
    }
}

impl From<i64> for Value {
    fn from(i: i64) -> Self {
        Value::Int(i)
    }
}

impl From<f64> for Value {
    fn from(f: f64) -> Self {
        Value::Float(f)
    }
}

/// Renders bytes as a double-quoted string, escaping control and non-UTF-8 bytes and
/// cutting after 64 bytes, so an error message never carries raw binary.
pub fn quote_bytes(bytes: &[u8]) -> String {
    // A URL given where it does not belong (say, as a limiter name) must not show its
    // password in the message either.
    let looks_like_url = memchr::memmem::find(bytes, b"://").is_some()
        && (bytes.contains(&b'@') || memchr::memmem::find(bytes, b"pass").is_some());
    if looks_like_url {
        let masked = crate::mask::mask_password(&String::from_utf8_lossy(bytes));
        return quote_raw(masked.as_bytes());
    }
    quote_raw(bytes)
}

fn quote_raw(bytes: &[u8]) -> String {
    const MAX: usize = 64;
    let shown = &bytes[..bytes.len().min(MAX)];
    let mut out = String::with_capacity(shown.len() + 2);
    out.push('"');
    for chunk in shown.utf8_chunks() {
        for c in chunk.valid().chars() {
            match c {
                '"' => out.push_str("\\\""),
                '\\' => out.push_str("\\\\"),
                c if c.is_control() => out.push_str(&format!("\\x{:02x}", c as u32)),
                c => out.push(c),
            }
        }
        for b in chunk.invalid() {
            out.push_str(&format!("\\x{b:02x}"));
        }
    }
    out.push('"');
    if bytes.len() > MAX {
        out.push_str(&format!("... ({} bytes)", bytes.len()));
    }
    out
}

// The option helpers every parser shares (`options`, `tls`): here, with the type they
// read, so no parser imports another's.

/// The error of an option that is not what it `expected`: names the option, shows the value.
pub fn type_error(option: &str, expected: &str, got: &Value) -> ConfigError {
    ConfigError::new(
        option,
        format!(
            "must be {expected}, got {} {}",
            got.type_name(),
            got.describe()
        ),
    )
}

/// The value of option `k` in an options array; a `null` value counts as not given.
pub fn option<'a>(entries: &'a [(String, Value)], k: &str) -> Option<&'a Value> {
    entries
        .iter()
        .find(|(key, _)| key == k)
        .map(|(_, v)| v)
        .filter(|v| !matches!(v, Value::Null))
}

/// The entries of an options array (`option` names it in the error); an empty PHP array
/// is a list, and counts as an empty map.
pub fn map_entries<'a>(option: &str, v: &'a Value) -> Result<&'a [(String, Value)], ConfigError> {
    match v {
        Value::Map(entries) => Ok(entries),
        Value::List(items) if items.is_empty() => Ok(&[]),
        _ => Err(type_error(option, "an array with string keys", v)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quote_escapes_control_and_binary_and_cuts() {
        assert_eq!(quote_bytes(b"shop-1"), "\"shop-1\"");
        assert_eq!(quote_bytes(b"a\nb"), "\"a\\x0ab\"");
        assert_eq!(quote_bytes(b"\xff\"x"), "\"\\xff\\\"x\"");
        let long = vec![b'a'; 100];
        assert!(quote_bytes(&long).ends_with("... (100 bytes)"));
    }
}
