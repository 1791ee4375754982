//! Which input case of a problem: the open set of case families (the one list of the known
//! ones, [`FAMILIES`]) and a case within one.

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// One row of [`FAMILIES`]: a case family as the command line, the records and the worker
/// protocol name it, and what its inputs are.
#[derive(Debug)]
pub struct FamilySpec {
    pub family: CaseFamily,
    /// The family's name everywhere outside Rust (`--families`, records, `make_case`).
    pub name: &'static str,
    /// Its floating-point inputs, in one line.
    pub about: &'static str,
}

/// Declares [`CaseFamily`] and [`FAMILIES`] from one list, so that a family's variant, name
/// and description are written once and cannot disagree.
macro_rules! case_families {
    ($($variant:ident = $name:literal, $about:literal;)*) => {
        /// A family of input cases. Open: names kbench does not know yet survive a round
        /// trip.
        #[derive(Debug, Clone, PartialEq, Eq, Hash)]
        pub enum CaseFamily {
            $(#[doc = $about] $variant,)*
            Other(String),
        }

        /// Every family kbench knows, `random` first, the stress families after it in the
        /// order a run takes them. The one list: the command line's `--families`, the stress
        /// module and the checks of the Python worker's generators and of the docs read it
        /// (CONTRIBUTING.md, "Adding a case family").
        pub const FAMILIES: &[FamilySpec] = &[
            $(FamilySpec { family: CaseFamily::$variant, name: $name, about: $about },)*
        ];

        impl CaseFamily {
            pub fn as_str(&self) -> &str {
                match self {
                    $(CaseFamily::$variant => $name,)*
                    CaseFamily::Other(s) => s,
                }
            }
        }

        impl From<&str> for CaseFamily {
            fn from(s: &str) -> Self {
                match s {
                    $($name => CaseFamily::$variant,)*
                    other => CaseFamily::Other(other.to_string()),
                }
            }
        }
    };
}

case_families! {
    Random = "random", "KernelBench-compatible: the problem's own `get_inputs`, fresh per trial.";
    Signed = "signed", "Standard normal times a per-element scale in [0.1, 10].";
    NanInf = "nan-inf", "`signed`, plus one NaN, one +Inf and one -Inf.";
    Denormal = "denormal", "Half subnormal for the working dtype, half normal in [tiny, 1].";
    Fp16Saturation = "fp16-saturation",
        "Magnitudes in [32752, 65504]: fp16's edge, finite in fp32.";
    Large = "large", "Magnitudes in [1e2, 1e5], random signs.";
    Small = "small", "Magnitudes in [1e-8, 1e-5], random signs.";
    Cancellation = "cancellation",
        "Each row of the last dimension sums to nearly zero with terms up to 1e3.";
}

impl CaseFamily {
    /// The stress families: every known family but `random`, in the order a run takes them.
    pub fn stress() -> impl Iterator<Item = CaseFamily> {
        FAMILIES
            .iter()
            .map(|f| f.family.clone())
            .filter(|f| *f != CaseFamily::Random)
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

    #[test]
    fn every_known_family_round_trips_by_its_name_and_random_comes_first() {
        assert_eq!(FAMILIES[0].family, CaseFamily::Random);
        for spec in FAMILIES {
            assert_eq!(spec.family.as_str(), spec.name);
            assert_eq!(CaseFamily::from(spec.name), spec.family);
        }
        assert_eq!(CaseFamily::stress().count(), FAMILIES.len() - 1);
    }
}
