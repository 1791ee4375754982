use serde::{Deserialize, Serialize};

/// Element types a worker may hand over. Names match the protocol's `dtype` strings.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Dtype {
    F64,
    F32,
    F16,
    Bf16,
    I64,
    I32,
    I16,
    I8,
    U8,
    Bool,
}

impl Dtype {
    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            Dtype::F64 | Dtype::I64 => 8,
            Dtype::F32 | Dtype::I32 => 4,
            Dtype::F16 | Dtype::Bf16 | Dtype::I16 => 2,
            Dtype::I8 | Dtype::U8 | Dtype::Bool => 1,
        }
    }

    pub fn is_float(self) -> bool {
        matches!(self, Dtype::F64 | Dtype::F32 | Dtype::F16 | Dtype::Bf16)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Dtype::F64 => "f64",
            Dtype::F32 => "f32",
            Dtype::F16 => "f16",
            Dtype::Bf16 => "bf16",
            Dtype::I64 => "i64",
            Dtype::I32 => "i32",
            Dtype::I16 => "i16",
            Dtype::I8 => "i8",
            Dtype::U8 => "u8",
            Dtype::Bool => "bool",
        }
    }
}

impl std::fmt::Display for Dtype {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum TensorError {
    #[error("tensor of dtype {dtype} and shape {shape:?} needs {expected} bytes, got {got}")]
    SizeMismatch {
        dtype: Dtype,
        shape: Vec<u64>,
        expected: u64,
        got: u64,
    },
    #[error("tensor shape {0:?} overflows the element count")]
    Overflow(Vec<u64>),
}

/// A dense, row-major, little-endian tensor held in host memory.
///
/// Invariant (checked by [`HostTensor::new`]): `data.len() == numel(shape) * dtype.size()`.
#[derive(Debug, Clone, PartialEq)]
pub struct HostTensor {
    dtype: Dtype,
    shape: Vec<u64>,
    data: Vec<u8>,
}

impl HostTensor {
    pub fn new(dtype: Dtype, shape: Vec<u64>, data: Vec<u8>) -> Result<Self, TensorError> {
        let numel = numel(&shape).ok_or_else(|| TensorError::Overflow(shape.clone()))?;
        let expected = numel
            .checked_mul(dtype.size() as u64)
            .ok_or_else(|| TensorError::Overflow(shape.clone()))?;
        if expected != data.len() as u64 {
            return Err(TensorError::SizeMismatch {
                dtype,
                shape,
                expected,
                got: data.len() as u64,
            });
        }
        Ok(Self { dtype, shape, data })
    }

    /// Builds an f32 tensor (handy in tests).
    pub fn from_f32(shape: Vec<u64>, values: &[f32]) -> Result<Self, TensorError> {
        let data = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        Self::new(Dtype::F32, shape, data)
    }

    /// Builds an f64 tensor (handy in tests).
    pub fn from_f64(shape: Vec<u64>, values: &[f64]) -> Result<Self, TensorError> {
        let data = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        Self::new(Dtype::F64, shape, data)
    }

    pub fn dtype(&self) -> Dtype {
        self.dtype
    }
    pub fn shape(&self) -> &[u64] {
        &self.shape
    }
    pub fn data(&self) -> &[u8] {
        &self.data
    }
    pub fn into_data(self) -> Vec<u8> {
        self.data
    }
    /// Number of elements.
    pub fn numel(&self) -> u64 {
        // new() proved this does not overflow.
        numel(&self.shape).unwrap_or(0)
    }
}

/// Product of the dimensions, `None` on overflow. An empty shape is a scalar (1 element).
pub fn numel(shape: &[u64]) -> Option<u64> {
    shape.iter().try_fold(1u64, |acc, &d| acc.checked_mul(d))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn size_is_checked() {
        assert!(HostTensor::new(Dtype::F32, vec![2, 3], vec![0; 24]).is_ok());
        let err = HostTensor::new(Dtype::F32, vec![2, 3], vec![0; 20]).unwrap_err();
        assert!(matches!(
            err,
            TensorError::SizeMismatch {
                expected: 24,
                got: 20,
                ..
            }
        ));
        assert!(HostTensor::new(Dtype::F16, vec![], vec![0; 2]).is_ok());
        assert!(matches!(
            HostTensor::new(Dtype::F64, vec![u64::MAX, 4], vec![]),
            Err(TensorError::Overflow(_))
        ));
    }

    #[test]
    fn dtype_strings_round_trip() {
        for d in [
            Dtype::F64,
            Dtype::F32,
            Dtype::F16,
            Dtype::Bf16,
            Dtype::I64,
            Dtype::Bool,
        ] {
            let s = serde_json::to_string(&d).unwrap();
            assert_eq!(s, format!("\"{}\"", d.as_str()));
            assert_eq!(serde_json::from_str::<Dtype>(&s).unwrap(), d);
        }
    }
}
