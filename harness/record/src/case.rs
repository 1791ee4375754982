//! Which input case of a problem: the open set of case families and a case within one.

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A family of input cases. Open: names kbench does not know yet survive a round trip.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum CaseFamily {
    /// KernelBench-compatible: the problem's own `get_inputs`, fresh per trial.
    Random,
    Signed,
    NanInf,
    Denormal,
    Fp16Saturation,
    Large,
    Small,
    Cancellation,
    Other(String),
}

impl CaseFamily {
    pub fn as_str(&self) -> &str {
        match self {
            CaseFamily::Random => "random",
            CaseFamily::Signed => "signed",
            CaseFamily::NanInf => "nan-inf",
            CaseFamily::Denormal => "denormal",
            CaseFamily::Fp16Saturation => "fp16-saturation",
            CaseFamily::Large => "large",
            CaseFamily::Small => "small",
            CaseFamily::Cancellation => "cancellation",
            CaseFamily::Other(s) => s,
        }
    }
}

impl From<&str> for CaseFamily {
    fn from(s: &str) -> Self {
        match s {
            "random" => CaseFamily::Random,
            "signed" => CaseFamily::Signed,
            "nan-inf" => CaseFamily::NanInf,
            "denormal" => CaseFamily::Denormal,
            "fp16-saturation" => CaseFamily::Fp16Saturation,
            "large" => CaseFamily::Large,
            "small" => CaseFamily::Small,
            "cancellation" => CaseFamily::Cancellation,
            other => CaseFamily::Other(other.to_string()),
        }
    }
}

impl std::fmt::Display for CaseFamily {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for CaseFamily {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for CaseFamily {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Ok(CaseFamily::from(String::deserialize(d)?.as_str()))
    }
}

/// Which input case of a problem.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct CaseRef {
    pub family: CaseFamily,
    /// 0-based index within the family.
    pub index: u32,
}

impl std::fmt::Display for CaseRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}#{}", self.family, self.index)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn open_case_family_round_trips() {
        for s in ["random", "nan-inf", "fp16-saturation", "my-new-family"] {
            let f = CaseFamily::from(s);
            let j = serde_json::to_string(&f).unwrap();
            assert_eq!(j, format!("\"{s}\""));
            assert_eq!(serde_json::from_str::<CaseFamily>(&j).unwrap(), f);
        }
        assert_eq!(CaseFamily::from("x"), CaseFamily::Other("x".into()));
    }
}
