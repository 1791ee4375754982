//! The rules an output can break, as records and reports name them.

/// The rule an output broke. Names match `Outcome::Mismatch::rule`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Rule {
    Shape,
    Dtype,
    /// `|c − r| > atol + rtol·|r|` for finite values (exact inequality for integers and bools).
    Elementwise,
    /// NaN or ±Inf in one tensor that the other does not have, with the same sign, at the
    /// same index.
    NanInfPosition,
    /// The strict profile's normwise bound against the float64 reference.
    Float64Gate,
}

impl Rule {
    pub fn as_str(self) -> &'static str {
        match self {
            Rule::Shape => "shape",
            Rule::Dtype => "dtype",
            Rule::Elementwise => "elementwise",
            Rule::NanInfPosition => "nan/inf position",
            Rule::Float64Gate => "float64 gate",
        }
    }
}

impl std::fmt::Display for Rule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}
