//! Metadata values: the thirteen GGUF value types, arrays of any of them (arrays included).
//!
//! Arrays are stored by element type (`Vec<u32>`, `Vec<String>`, ...) rather than as a vector
//! of [`Value`]s: a million-entry `u8` array then takes a megabyte, not thirty-two, which keeps
//! what a crafted file can make the reader allocate close to the file's own size.

use std::fmt;

/// A GGUF metadata value type (`gguf_type`), with its id in the file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ValueType {
    U8 = 0,
    I8 = 1,
    U16 = 2,
    I16 = 3,
    U32 = 4,
    I32 = 5,
    F32 = 6,
    Bool = 7,
    String = 8,
    Array = 9,
    U64 = 10,
    I64 = 11,
    F64 = 12,
}

impl ValueType {
    pub const ALL: [ValueType; 13] = [
        ValueType::U8,
        ValueType::I8,
        ValueType::U16,
        ValueType::I16,
        ValueType::U32,
        ValueType::I32,
        ValueType::F32,
        ValueType::Bool,
        ValueType::String,
        ValueType::Array,
        ValueType::U64,
        ValueType::I64,
        ValueType::F64,
    ];

    pub fn from_id(id: u32) -> Option<ValueType> {
        ValueType::ALL.get(usize::try_from(id).ok()?).copied()
    }

    pub const fn id(self) -> u32 {
        self as u32
    }

    /// The name used in GGUF documents and by `gguf-py` (`uint8`, `float32`, `string`, ...).
    pub const fn name(self) -> &'static str {
        match self {
            ValueType::U8 => "uint8",
            ValueType::I8 => "int8",
            ValueType::U16 => "uint16",
            ValueType::I16 => "int16",
            ValueType::U32 => "uint32",
            ValueType::I32 => "int32",
            ValueType::F32 => "float32",
            ValueType::Bool => "bool",
            ValueType::String => "string",
            ValueType::Array => "array",
            ValueType::U64 => "uint64",
            ValueType::I64 => "int64",
            ValueType::F64 => "float64",
        }
    }

    /// Bytes of a scalar of this type; `None` for strings and arrays.
    pub const fn scalar_size(self) -> Option<u64> {
        match self {
            ValueType::U8 | ValueType::I8 | ValueType::Bool => Some(1),
            ValueType::U16 | ValueType::I16 => Some(2),
            ValueType::U32 | ValueType::I32 | ValueType::F32 => Some(4),
            ValueType::U64 | ValueType::I64 | ValueType::F64 => Some(8),
            ValueType::String | ValueType::Array => None,
        }
    }

    /// The fewest bytes one value of this type takes in a file: what an array's length is
    /// checked against before anything is allocated for it.
    pub(crate) const fn min_encoded_size(self) -> u64 {
        match self.scalar_size() {
            Some(n) => n,
            // A string is at least its u64 length; an array its u32 type and u64 length.
            None => match self {
                ValueType::String => 8,
                _ => 12,
            },
        }
    }
}

impl fmt::Display for ValueType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One metadata value.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    U8(u8),
    I8(i8),
    U16(u16),
    I16(i16),
    U32(u32),
    I32(i32),
    F32(f32),
    Bool(bool),
    String(String),
    Array(Array),
    U64(u64),
    I64(i64),
    F64(f64),
}

/// A metadata array: elements of one type, stored by that type.
#[derive(Debug, Clone, PartialEq)]
pub enum Array {
    U8(Vec<u8>),
    I8(Vec<i8>),
    U16(Vec<u16>),
    I16(Vec<i16>),
    U32(Vec<u32>),
    I32(Vec<i32>),
    F32(Vec<f32>),
    Bool(Vec<bool>),
    String(Vec<String>),
    Array(Vec<Array>),
    U64(Vec<u64>),
    I64(Vec<i64>),
    F64(Vec<f64>),
}

impl Value {
    pub fn value_type(&self) -> ValueType {
        match self {
            Value::U8(_) => ValueType::U8,
            Value::I8(_) => ValueType::I8,
            Value::U16(_) => ValueType::U16,
            Value::I16(_) => ValueType::I16,
            Value::U32(_) => ValueType::U32,
            Value::I32(_) => ValueType::I32,
            Value::F32(_) => ValueType::F32,
            Value::Bool(_) => ValueType::Bool,
            Value::String(_) => ValueType::String,
            Value::Array(_) => ValueType::Array,
            Value::U64(_) => ValueType::U64,
            Value::I64(_) => ValueType::I64,
            Value::F64(_) => ValueType::F64,
        }
    }

    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::String(s) => Some(s),
            _ => None,
        }
    }

    pub fn as_bool(&self) -> Option<bool> {
        match *self {
            Value::Bool(b) => Some(b),
            _ => None,
        }
    }

    /// Any integer value that is non-negative, as u64.
    pub fn as_u64(&self) -> Option<u64> {
        match *self {
            Value::U8(v) => Some(v.into()),
            Value::U16(v) => Some(v.into()),
            Value::U32(v) => Some(v.into()),
            Value::U64(v) => Some(v),
            Value::I8(v) => u64::try_from(v).ok(),
            Value::I16(v) => u64::try_from(v).ok(),
            Value::I32(v) => u64::try_from(v).ok(),
            Value::I64(v) => u64::try_from(v).ok(),
            _ => None,
        }
    }

    /// Any integer value that fits an i64.
    pub fn as_i64(&self) -> Option<i64> {
        match *self {
            Value::U8(v) => Some(v.into()),
            Value::U16(v) => Some(v.into()),
            Value::U32(v) => Some(v.into()),
            Value::U64(v) => i64::try_from(v).ok(),
            Value::I8(v) => Some(v.into()),
            Value::I16(v) => Some(v.into()),
            Value::I32(v) => Some(v.into()),
            Value::I64(v) => Some(v),
            _ => None,
        }
    }

    /// Any float value, as f64.
    pub fn as_f64(&self) -> Option<f64> {
        match *self {
            Value::F32(v) => Some(v.into()),
            Value::F64(v) => Some(v),
            _ => None,
        }
    }

    pub fn as_array(&self) -> Option<&Array> {
        match self {
            Value::Array(a) => Some(a),
            _ => None,
        }
    }

    /// A one-line rendering for listings: strings quoted and cut after `max_chars`, arrays
    /// cut after `max_items` elements (with their type and length).
    pub fn preview(&self, max_items: usize, max_chars: usize) -> String {
        match self {
            Value::String(s) => quote(s, max_chars),
            Value::Array(a) => a.preview(max_items, max_chars),
            other => other.to_string(),
        }
    }
}

fn quote(s: &str, max_chars: usize) -> String {
    let cut: String = s.chars().take(max_chars).collect();
    let more = if cut.len() < s.len() { "..." } else { "" };
    format!("{cut:?}{more}")
}

impl fmt::Display for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Value::U8(v) => write!(f, "{v}"),
            Value::I8(v) => write!(f, "{v}"),
            Value::U16(v) => write!(f, "{v}"),
            Value::I16(v) => write!(f, "{v}"),
            Value::U32(v) => write!(f, "{v}"),
            Value::I32(v) => write!(f, "{v}"),
            // Debug: the shortest text that reads back the same, with an exponent when long.
            Value::F32(v) => write!(f, "{v:?}"),
            Value::Bool(v) => write!(f, "{v}"),
            Value::String(v) => write!(f, "{v:?}"),
            Value::Array(a) => write!(f, "{}", a.preview(usize::MAX, usize::MAX)),
            Value::U64(v) => write!(f, "{v}"),
            Value::I64(v) => write!(f, "{v}"),
            Value::F64(v) => write!(f, "{v:?}"),
        }
    }
}

impl Array {
    pub fn element_type(&self) -> ValueType {
        match self {
            Array::U8(_) => ValueType::U8,
            Array::I8(_) => ValueType::I8,
            Array::U16(_) => ValueType::U16,
            Array::I16(_) => ValueType::I16,
            Array::U32(_) => ValueType::U32,
            Array::I32(_) => ValueType::I32,
            Array::F32(_) => ValueType::F32,
            Array::Bool(_) => ValueType::Bool,
            Array::String(_) => ValueType::String,
            Array::Array(_) => ValueType::Array,
            Array::U64(_) => ValueType::U64,
            Array::I64(_) => ValueType::I64,
            Array::F64(_) => ValueType::F64,
        }
    }

    pub fn len(&self) -> usize {
        match self {
            Array::U8(v) => v.len(),
            Array::I8(v) => v.len(),
            Array::U16(v) => v.len(),
            Array::I16(v) => v.len(),
            Array::U32(v) => v.len(),
            Array::I32(v) => v.len(),
            Array::F32(v) => v.len(),
            Array::Bool(v) => v.len(),
            Array::String(v) => v.len(),
            Array::Array(v) => v.len(),
            Array::U64(v) => v.len(),
            Array::I64(v) => v.len(),
            Array::F64(v) => v.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// An empty array of `element` type.
    pub fn empty(element: ValueType) -> Array {
        match element {
            ValueType::U8 => Array::U8(Vec::new()),
            ValueType::I8 => Array::I8(Vec::new()),
            ValueType::U16 => Array::U16(Vec::new()),
            ValueType::I16 => Array::I16(Vec::new()),
            ValueType::U32 => Array::U32(Vec::new()),
            ValueType::I32 => Array::I32(Vec::new()),
            ValueType::F32 => Array::F32(Vec::new()),
            ValueType::Bool => Array::Bool(Vec::new()),
            ValueType::String => Array::String(Vec::new()),
            ValueType::Array => Array::Array(Vec::new()),
            ValueType::U64 => Array::U64(Vec::new()),
            ValueType::I64 => Array::I64(Vec::new()),
            ValueType::F64 => Array::F64(Vec::new()),
        }
    }

    /// Element `i` as a [`Value`] (a copy; strings and nested arrays are cloned).
    pub fn get(&self, i: usize) -> Option<Value> {
        Some(match self {
            Array::U8(v) => Value::U8(*v.get(i)?),
            Array::I8(v) => Value::I8(*v.get(i)?),
            Array::U16(v) => Value::U16(*v.get(i)?),
            Array::I16(v) => Value::I16(*v.get(i)?),
            Array::U32(v) => Value::U32(*v.get(i)?),
            Array::I32(v) => Value::I32(*v.get(i)?),
            Array::F32(v) => Value::F32(*v.get(i)?),
            Array::Bool(v) => Value::Bool(*v.get(i)?),
            Array::String(v) => Value::String(v.get(i)?.clone()),
            Array::Array(v) => Value::Array(v.get(i)?.clone()),
            Array::U64(v) => Value::U64(*v.get(i)?),
            Array::I64(v) => Value::I64(*v.get(i)?),
            Array::F64(v) => Value::F64(*v.get(i)?),
        })
    }

    /// The strings, if this is an array of strings.
    pub fn as_strings(&self) -> Option<&[String]> {
        match self {
            Array::String(v) => Some(v),
            _ => None,
        }
    }

    /// How many levels of arrays this is (1 for an array of scalars or strings; an empty array
    /// of arrays counts 2, as its element type says).
    pub fn depth(&self) -> usize {
        match self {
            Array::Array(v) => 1 + v.iter().map(Array::depth).max().unwrap_or(1),
            _ => 1,
        }
    }

    /// `[type; len] [a, b, ...]`, cut after `max_items` elements.
    pub fn preview(&self, max_items: usize, max_chars: usize) -> String {
        let shown = self.len().min(max_items);
        let items: Vec<String> = (0..shown)
            .filter_map(|i| self.get(i))
            .map(|v| match v {
                Value::String(s) => quote(&s, max_chars),
                Value::Array(a) => a.preview(max_items, max_chars),
                other => other.to_string(),
            })
            .collect();
        let more = if shown < self.len() { ", ..." } else { "" };
        format!("[{}; {}] [{}{more}]", self.element_type(), self.len(), items.join(", "))
    }
}

macro_rules! value_from {
    ($($t:ty => $variant:ident),* $(,)?) => {
        $(
            impl From<$t> for Value {
                fn from(v: $t) -> Value {
                    Value::$variant(v)
                }
            }
            impl From<Vec<$t>> for Array {
                fn from(v: Vec<$t>) -> Array {
                    Array::$variant(v)
                }
            }
            impl From<Vec<$t>> for Value {
                fn from(v: Vec<$t>) -> Value {
                    Value::Array(Array::$variant(v))
                }
            }
        )*
    };
}

value_from!(
    u8 => U8, i8 => I8, u16 => U16, i16 => I16, u32 => U32, i32 => I32, f32 => F32, bool => Bool,
    String => String, u64 => U64, i64 => I64, f64 => F64, Array => Array,
);

impl From<&str> for Value {
    fn from(v: &str) -> Value {
        Value::String(v.to_string())
    }
}

impl From<Vec<&str>> for Value {
    fn from(v: Vec<&str>) -> Value {
        Value::Array(Array::String(v.into_iter().map(str::to_string).collect()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn type_ids_round_trip() {
        for t in ValueType::ALL {
            assert_eq!(ValueType::from_id(t.id()), Some(t));
        }
        assert_eq!(ValueType::from_id(13), None);
        assert_eq!(ValueType::from_id(u32::MAX), None);
    }

    #[test]
    fn previews_cut_long_values() {
        let v = Value::from((0..100u32).collect::<Vec<_>>());
        assert_eq!(v.preview(3, 10), "[uint32; 100] [0, 1, 2, ...]");
        assert_eq!(Value::from("abcdefgh").preview(3, 4), "\"abcd\"...");
        let nested = Value::Array(Array::Array(vec![Array::U8(vec![1]), Array::String(vec!["x".into()])]));
        assert_eq!(nested.preview(8, 8), "[array; 2] [[uint8; 1] [1], [string; 1] [\"x\"]]");
    }

    #[test]
    fn integer_accessors_convert_only_when_exact() {
        assert_eq!(Value::I32(-1).as_u64(), None);
        assert_eq!(Value::U64(u64::MAX).as_i64(), None);
        assert_eq!(Value::U16(7).as_u64(), Some(7));
        assert_eq!(Value::F32(1.5).as_f64(), Some(1.5));
        assert_eq!(Value::F32(1.5).as_u64(), None);
    }
}
