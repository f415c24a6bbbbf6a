//! PHP values into the core's `Value` tree, so that all validation happens in the core.

use checkout_guard_core::telemetry::AttrValue;
use checkout_guard_core::value::quote_bytes;
use checkout_guard_core::{ConfigError, Value};
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

fn zval(z: &Zval, depth: usize) -> Result<Value, ConfigError> {
    let z = z.dereference();
    Ok(if z.is_null() {
        Value::Null
    } else if let Some(b) = z.bool() {
        Value::Bool(b)
    } else if let Some(i) = z.long() {
        Value::Int(i)
    } else if let Some(f) = z.double() {
        Value::Float(f)
    } else if let Some(s) = z.zend_str() {
        Value::Str(s.as_bytes().to_vec())
    } else if let Some(ht) = z.array() {
        array(ht, depth)?
    } else {
        Value::Other(z.get_type().to_string())
    })
}

/// Event attributes: string keys, scalar or null values (New Relic's rule). Anything else
/// is a ConfigurationException naming the attribute.
pub fn attributes(ht: &ZendHashTable) -> Result<Vec<(String, AttrValue)>, ConfigError> {
    let mut out = Vec::with_capacity(ht.len());
    for (k, v) in ht.iter() {
        let key = match k {
            ArrayKey::String(s) => s,
            ArrayKey::ZendString(s) => String::from_utf8_lossy(s.as_bytes()).into_owned(),
            other => other.to_string(),
        };
        let v = v.dereference();
        let value = if v.is_null() {
            AttrValue::Null
        } else if let Some(b) = v.bool() {
            AttrValue::Bool(b)
        } else if let Some(i) = v.long() {
            AttrValue::Int(i)
        } else if let Some(f) = v.double() {
            AttrValue::Float(f)
        } else if let Some(s) = v.zend_str() {
            AttrValue::from_bytes(s.as_bytes())
        } else {
            return Err(ConfigError::new(
                format!("attributes[{}]", quote_bytes(key.as_bytes())),
                format!("must be a scalar or null, got {}", v.get_type()),
            ));
        };
        out.push((key, value));
    }
    Ok(out)
}
