//! PHP values into the core's `Value` tree, so that all validation happens in the core.

use checkout_guard_config::value::quote_bytes;
use checkout_guard_config::Value;
use checkout_guard_model::ConfigError;
use checkout_guard_runtime::telemetry::{name, AttrValue, Name};
use ext_php_rs::convert::{FromZval, StubLiteral};
use ext_php_rs::flags::DataType;
use ext_php_rs::types::{ArrayKey, ZendHashTable, Zval};

/// Options arrays are shallow; anything deeper is a mistake (or a self-reference).
const MAX_DEPTH: usize = 8;

pub fn array_to_value(ht: &ZendHashTable) -> Result<Value, ConfigError> {
    array(ht, 0)
}

fn array(ht: &ZendHashTable, depth: usize) -> Result<Value, ConfigError> {
    if depth >= MAX_DEPTH {
        return Err(ConfigError::new(
            "options",
            format!("are nested more than {MAX_DEPTH} levels deep"),
        ));
    }
    if ht.has_sequential_keys() {
        return ht
            .iter()
            .map(|(_, v)| zval(v, depth + 1))
            .collect::<Result<Vec<_>, _>>()
            .map(Value::List);
    }
    ht.iter()
        .map(|(k, v)| {
            let key = match k {
                ArrayKey::String(s) => s,
                ArrayKey::ZendString(s) => String::from_utf8_lossy(s.as_bytes()).into_owned(),
                other => other.to_string(),
            };
            Ok((key, zval(v, depth + 1)?))
        })
        .collect::<Result<Vec<_>, _>>()
        .map(Value::Map)
}

/// A PHP scalar or null, borrowed from its zval.
enum Scalar<'a> {
    Null,
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(&'a [u8]),
}

/// The scalar a zval holds (references followed), or None for arrays and objects.
fn scalar(z: &Zval) -> Option<Scalar<'_>> {
    let z = z.dereference();
    Some(if z.is_null() {
        Scalar::Null
    } else if let Some(b) = z.bool() {
        Scalar::Bool(b)
    } else if let Some(i) = z.long() {
        Scalar::Int(i)
    } else if let Some(f) = z.double() {
        Scalar::Float(f)
    } else {
        Scalar::Str(z.zend_str()?.as_bytes())
    })
}

fn zval(z: &Zval, depth: usize) -> Result<Value, ConfigError> {
    Ok(match scalar(z) {
        Some(Scalar::Null) => Value::Null,
        Some(Scalar::Bool(b)) => Value::Bool(b),
        Some(Scalar::Int(i)) => Value::Int(i),
        Some(Scalar::Float(f)) => Value::Float(f),
        Some(Scalar::Str(s)) => Value::Str(s.to_vec()),
        None => match z.dereference().array() {
            Some(ht) => array(ht, depth)?,
            None => Value::Other(z.dereference().get_type().to_string()),
        },
    })
}

/// Event attributes: string keys, scalar or null values (New Relic's rule). Anything else
/// is a ConfigurationException naming the attribute.
///
/// This runs on every measured call, so it reads the hash table's buckets directly (no
/// key copies) and makes well-known names static.
pub fn attributes(ht: &ZendHashTable) -> Result<Vec<(Name, AttrValue)>, ConfigError> {
    let mut out = Vec::with_capacity(ht.len());
    let mut failed = None;
    for_each_entry(ht, |key, v| {
        if failed.is_some() {
            return;
        }
        let value = match scalar(v) {
            Some(Scalar::Null) => AttrValue::Null,
            Some(Scalar::Bool(b)) => AttrValue::Bool(b),
            Some(Scalar::Int(i)) => AttrValue::Int(i),
            Some(Scalar::Float(f)) => AttrValue::Float(f),
            Some(Scalar::Str(s)) => AttrValue::from_bytes(s),
            None => {
                failed = Some(ConfigError::new(
                    format!("attributes[{}]", quote_bytes(&key.as_bytes())),
                    format!(
                        "must be a scalar or null, got {}",
                        v.dereference().get_type()
                    ),
                ));
                return;
            }
        };
        let attr = match key {
            Key::Str(b) => match std::str::from_utf8(b) {
                Ok(s) => name(s),
                Err(_) => name(&String::from_utf8_lossy(b)),
            },
            Key::Int(i) => name(&i.to_string()),
        };
        out.push((attr, value));
    });
    match failed {
        Some(e) => Err(e),
        None => Ok(out),
    }
}

enum Key<'a> {
    Str(&'a [u8]),
    Int(i64),
}

impl Key<'_> {
    fn as_bytes(&self) -> Vec<u8> {
        match self {
            Key::Str(b) => b.to_vec(),
            Key::Int(i) => i.to_string().into_bytes(),
        }
    }
}

/// Visits the entries of a hash table in order, without copying keys.
fn for_each_entry(ht: &ZendHashTable, mut f: impl FnMut(Key<'_>, &Zval)) {
    const HASH_FLAG_PACKED: u32 = 1 << 2;
    // SAFETY: reads the engine's own layout of a live array (PHP 8.2+: packed arrays hold
    // bare zvals, others buckets); slots below nNumUsed are initialized, deleted ones are
    // IS_UNDEF and skipped.
    unsafe {
        let packed = ht.u.flags & HASH_FLAG_PACKED != 0;
        for i in 0..ht.nNumUsed as usize {
            if packed {
                let zv = &*ht.__bindgen_anon_1.arPacked.add(i);
                if zv.get_type() != DataType::Undef {
                    f(Key::Int(i as i64), zv);
                }
            } else {
                let b = &*ht.__bindgen_anon_1.arData.add(i);
                if b.val.get_type() == DataType::Undef {
                    continue;
                }
                match b.key.as_ref() {
                    Some(k) => f(Key::Str(k.as_bytes()), &b.val),
                    None => f(Key::Int(b.h as i64), &b.val),
                }
            }
        }
    }
}

/// An `array $attributes = []` parameter: PHP type `array`, default `[]` in the stubs,
/// borrowed without copying.
#[derive(Default, Clone, Copy)]
pub struct OptionalArray<'a>(pub Option<&'a ZendHashTable>);

impl<'a> FromZval<'a> for OptionalArray<'a> {
    const TYPE: DataType = DataType::Array;

    fn from_zval(zval: &'a Zval) -> Option<Self> {
        zval.array().map(|ht| OptionalArray(Some(ht)))
    }
}

impl StubLiteral for OptionalArray<'_> {
    fn stub_literal(&self) -> String {
        "[]".into()
    }
}
