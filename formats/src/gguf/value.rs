//! GGUF metadata values: scalars, strings and typed (possibly nested) arrays, with their encoding.

use std::fmt;

/// A GGUF metadata value type id (0..=12 of the spec).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum ValueType {
    /// 0: u8.
    U8,
    /// 1: i8.
    I8,
    /// 2: u16.
    U16,
    /// 3: i16.
    I16,
    /// 4: u32.
    U32,
    /// 5: i32.
    I32,
    /// 6: f32.
    F32,
    /// 7: bool (one byte, 0 or 1).
    Bool,
    /// 8: string (u64 length + UTF-8 bytes).
    String,
    /// 9: array (u32 element type, u64 count, elements).
    Array,
    /// 10: u64.
    U64,
    /// 11: i64.
    I64,
    /// 12: f64.
    F64,
}

impl ValueType {
    /// All types in id order.
    const ALL: [ValueType; 13] = [
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

    /// The type id written in the file.
    pub fn id(self) -> u32 {
        self as u32
    }

    /// The type for an id, if it is one of the 13 defined.
    pub fn from_id(id: u32) -> Option<ValueType> {
        ValueType::ALL.get(usize::try_from(id).ok()?).copied()
    }

    /// The fewest bytes one value of this type takes in a file.
    pub fn min_encoded_size(self) -> u64 {
        match self {
            ValueType::U8 | ValueType::I8 | ValueType::Bool => 1,
            ValueType::U16 | ValueType::I16 => 2,
            ValueType::U32 | ValueType::I32 | ValueType::F32 => 4,
            ValueType::U64 | ValueType::I64 | ValueType::F64 | ValueType::String => 8,
            ValueType::Array => 12,
        }
    }
}

impl fmt::Display for ValueType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = match self {
            ValueType::U8 => "u8",
            ValueType::I8 => "i8",
            ValueType::U16 => "u16",
            ValueType::I16 => "i16",
            ValueType::U32 => "u32",
            ValueType::I32 => "i32",
            ValueType::F32 => "f32",
            ValueType::Bool => "bool",
            ValueType::String => "string",
            ValueType::Array => "array",
            ValueType::U64 => "u64",
            ValueType::I64 => "i64",
            ValueType::F64 => "f64",
        };
        f.write_str(name)
    }
}

/// A GGUF metadata value (type ids 0..12 of the spec).
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    /// u8.
    U8(u8),
    /// i8.
    I8(i8),
    /// u16.
    U16(u16),
    /// i16.
    I16(i16),
    /// u32 (what llama.cpp expects for counts and ids).
    U32(u32),
    /// i32.
    I32(i32),
    /// f32 (what llama.cpp expects for float hyperparameters).
    F32(f32),
    /// bool.
    Bool(bool),
    /// UTF-8 string.
    String(String),
    /// Typed array.
    Array(Array),
    /// u64.
    U64(u64),
    /// i64.
    I64(i64),
    /// f64.
    F64(f64),
}

/// A typed GGUF array: all elements of one type, stored unboxed; arrays may nest.
#[derive(Clone, Debug, PartialEq)]
pub enum Array {
    /// u8 elements.
    U8(Vec<u8>),
    /// i8 elements.
    I8(Vec<i8>),
    /// u16 elements.
    U16(Vec<u16>),
    /// i16 elements.
    I16(Vec<i16>),
    /// u32 elements.
    U32(Vec<u32>),
    /// i32 elements.
    I32(Vec<i32>),
    /// f32 elements.
    F32(Vec<f32>),
    /// bool elements.
    Bool(Vec<bool>),
    /// string elements.
    String(Vec<String>),
    /// nested arrays (each with its own element type).
    Array(Vec<Array>),
    /// u64 elements.
    U64(Vec<u64>),
    /// i64 elements.
    I64(Vec<i64>),
    /// f64 elements.
    F64(Vec<f64>),
}

impl Array {
    /// The element type.
    pub fn elem_type(&self) -> ValueType {
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

    /// Number of elements.
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

    /// Whether the array has no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Appends the encoding (element type, count, elements) to `out`.
    pub(crate) fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.elem_type().id().to_le_bytes());
        out.extend_from_slice(&(self.len() as u64).to_le_bytes());
        macro_rules! put {
            ($v:expr) => {
                for x in $v {
                    out.extend_from_slice(&x.to_le_bytes());
                }
            };
        }
        match self {
            Array::U8(v) => out.extend_from_slice(v),
            Array::I8(v) => put!(v),
            Array::U16(v) => put!(v),
            Array::I16(v) => put!(v),
            Array::U32(v) => put!(v),
            Array::I32(v) => put!(v),
            Array::F32(v) => put!(v),
            Array::Bool(v) => out.extend(v.iter().map(|&b| b as u8)),
            Array::String(v) => v.iter().for_each(|s| encode_str(s, out)),
            Array::Array(v) => v.iter().for_each(|a| a.encode(out)),
            Array::U64(v) => put!(v),
            Array::I64(v) => put!(v),
            Array::F64(v) => put!(v),
        }
    }
}

impl Value {
    /// The value's type.
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

    /// Any integer value as i128 (lossless), or None for non-integers.
    fn as_int(&self) -> Option<i128> {
        Some(match *self {
            Value::U8(v) => v.into(),
            Value::I8(v) => v.into(),
            Value::U16(v) => v.into(),
            Value::I16(v) => v.into(),
            Value::U32(v) => v.into(),
            Value::I32(v) => v.into(),
            Value::U64(v) => v.into(),
            Value::I64(v) => v.into(),
            _ => return None,
        })
    }

    /// Any integer value that fits in a u32.
    pub fn as_u32(&self) -> Option<u32> {
        self.as_int()?.try_into().ok()
    }

    /// Any integer value that fits in a u64.
    pub fn as_u64(&self) -> Option<u64> {
        self.as_int()?.try_into().ok()
    }

    /// Any integer value that fits in an i64.
    pub fn as_i64(&self) -> Option<i64> {
        self.as_int()?.try_into().ok()
    }

    /// An f32 value, or an f64 value rounded to f32.
    pub fn as_f32(&self) -> Option<f32> {
        match *self {
            Value::F32(v) => Some(v),
            Value::F64(v) => Some(v as f32),
            _ => None,
        }
    }

    /// A string value.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::String(s) => Some(s),
            _ => None,
        }
    }

    /// A bool value.
    pub fn as_bool(&self) -> Option<bool> {
        match *self {
            Value::Bool(b) => Some(b),
            _ => None,
        }
    }

    /// An array value.
    pub fn as_array(&self) -> Option<&Array> {
        match self {
            Value::Array(a) => Some(a),
            _ => None,
        }
    }

    /// An array of strings.
    pub fn strings<S: Into<String>>(items: impl IntoIterator<Item = S>) -> Value {
        Value::Array(Array::String(items.into_iter().map(Into::into).collect()))
    }

    /// An array of f32.
    pub fn f32s(items: impl Into<Vec<f32>>) -> Value {
        Value::Array(Array::F32(items.into()))
    }

    /// An array of i32.
    pub fn i32s(items: impl Into<Vec<i32>>) -> Value {
        Value::Array(Array::I32(items.into()))
    }

    /// Appends the encoding (without the type id) to `out`.
    pub(crate) fn encode(&self, out: &mut Vec<u8>) {
        match self {
            Value::U8(v) => out.push(*v),
            Value::I8(v) => out.extend_from_slice(&v.to_le_bytes()),
            Value::U16(v) => out.extend_from_slice(&v.to_le_bytes()),
            Value::I16(v) => out.extend_from_slice(&v.to_le_bytes()),
            Value::U32(v) => out.extend_from_slice(&v.to_le_bytes()),
            Value::I32(v) => out.extend_from_slice(&v.to_le_bytes()),
            Value::F32(v) => out.extend_from_slice(&v.to_le_bytes()),
            Value::Bool(v) => out.push(*v as u8),
            Value::String(s) => encode_str(s, out),
            Value::Array(a) => a.encode(out),
            Value::U64(v) => out.extend_from_slice(&v.to_le_bytes()),
            Value::I64(v) => out.extend_from_slice(&v.to_le_bytes()),
            Value::F64(v) => out.extend_from_slice(&v.to_le_bytes()),
        }
    }
}

/// Appends a GGUF string (u64 length + bytes).
pub(crate) fn encode_str(s: &str, out: &mut Vec<u8>) {
    out.extend_from_slice(&(s.len() as u64).to_le_bytes());
    out.extend_from_slice(s.as_bytes());
}

macro_rules! value_from {
    ($($t:ty => $v:ident),*) => {$(
        impl From<$t> for Value {
            fn from(x: $t) -> Value {
                Value::$v(x.into())
            }
        }
    )*};
}

value_from!(u8 => U8, i8 => I8, u16 => U16, i16 => I16, u32 => U32, i32 => I32, f32 => F32, bool => Bool,
    String => String, &str => String, Array => Array, u64 => U64, i64 => I64, f64 => F64);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn type_ids_round_trip() {
        for id in 0..13 {
            assert_eq!(ValueType::from_id(id).unwrap().id(), id);
        }
        assert_eq!(ValueType::from_id(13), None);
        assert_eq!(ValueType::from_id(u32::MAX), None);
    }

    #[test]
    fn integer_accessors_accept_any_fitting_int() {
        assert_eq!(Value::U8(7).as_u32(), Some(7));
        assert_eq!(Value::I32(7).as_u64(), Some(7));
        assert_eq!(Value::I32(-1).as_u32(), None);
        assert_eq!(Value::U64(1 << 40).as_u32(), None);
        assert_eq!(Value::U64(1 << 40).as_u64(), Some(1 << 40));
        assert_eq!(Value::U64(u64::MAX).as_i64(), None);
        assert_eq!(Value::F32(1.0).as_u32(), None);
        assert_eq!(Value::F64(0.5).as_f32(), Some(0.5));
        assert_eq!(Value::from("x").as_str(), Some("x"));
        assert_eq!(Value::from(true).as_bool(), Some(true));
    }

    #[test]
    fn array_constructors() {
        let v = Value::strings(["a", "b"]);
        let a = v.as_array().unwrap();
        assert_eq!(a.elem_type(), ValueType::String);
        assert_eq!(a.len(), 2);
        assert!(Value::f32s(vec![]).as_array().unwrap().is_empty());
        assert_eq!(Value::i32s([1, 2, 3]).as_array(), Some(&Array::I32(vec![1, 2, 3])));
    }

    #[test]
    fn encodes_little_endian() {
        let mut out = Vec::new();
        Value::strings(["ab"]).encode(&mut out);
        assert_eq!(out, [8, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, b'a', b'b']);
        out.clear();
        Value::U16(0x0102).encode(&mut out);
        assert_eq!(out, [2, 1]);
    }
}
