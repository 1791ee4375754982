//! The rules an output can break, as records and reports name them.

/// The rule an output broke. Names match `Outcome::Mismatch::rule`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Rule {
    Shape,
    Dtype,
    /// `|c − r| > atol + rtol·|r|` for finite values (exact inequality for integers and bools).
    Elementwise,
    /// The reference is finite and the candidate is NaN or ±Inf.
    NonfiniteInvented,
    /// The reference is NaN and the candidate is finite where the output depends on the
    /// injected non-finite inputs (or, outside the `nan-inf` family, anywhere).
    DropsNan,
    /// The reference is ±Inf and the candidate is finite where the output depends on the
    /// injected non-finite inputs (or, outside the `nan-inf` family, anywhere).
    DropsInf,
    /// The reference is ±Inf and the candidate the opposite infinity.
    InfSign,
    /// NaN against ±Inf outside the `nan-inf` family (where either passes).
    NanInfKind,
    /// The strict profile's normwise bound against the float64 reference.
    Float64Gate,
}

impl Rule {
    pub fn as_str(self) -> &'static str {
        match self {
            Rule::Shape => "shape",
            Rule::Dtype => "dtype",
            Rule::Elementwise => "elementwise",
            Rule::NonfiniteInvented => "nonfinite-invented",
            Rule::DropsNan => "drops-nan",
            Rule::DropsInf => "drops-inf",
            Rule::InfSign => "inf-sign",
            Rule::NanInfKind => "nan-inf-kind",
            Rule::Float64Gate => "float64 gate",
        }
    }

    /// Whether this is one of the NaN/Inf rules (counted in `nonfinite_mismatches`).
    pub fn is_nonfinite(self) -> bool {
        matches!(
            self,
            Rule::NonfiniteInvented
                | Rule::DropsNan
                | Rule::DropsInf
                | Rule::InfSign
                | Rule::NanInfKind
        )
    }

    /// What the rule means, in one clause (for `kbench check` and notes).
    pub fn meaning(self) -> &'static str {
        match self {
            Rule::Shape => "the output has another shape than the reference's",
            Rule::Dtype => "the output has another dtype than the reference's",
            Rule::Elementwise => "|candidate − reference| > atol + rtol·|reference|",
            Rule::NonfiniteInvented => "the reference is finite and the candidate NaN or ±Inf",
            Rule::DropsNan => {
                "the reference is NaN where the output depends on a NaN or Inf input, and the candidate finite"
            }
            Rule::DropsInf => {
                "the reference is ±Inf where the output depends on a NaN or Inf input, and the candidate finite"
            }
            Rule::InfSign => "the reference is one infinity and the candidate the other",
            Rule::NanInfKind => "NaN against ±Inf (accepted only in the nan-inf family)",
            Rule::Float64Gate => "the output as a whole is further from float64 than the bound",
        }
    }

    /// The stable code of a NaN/Inf rule (0 for the others), as the GPU comparator packs it
    /// beside the flat index; [`Rule::from_code`] inverts it.
    pub fn code(self) -> u64 {
        match self {
            Rule::NonfiniteInvented => 1,
            Rule::DropsNan => 2,
            Rule::DropsInf => 3,
            Rule::InfSign => 4,
            Rule::NanInfKind => 5,
            _ => 0,
        }
    }

    /// The rule of an element-level code: 0 is `Elementwise`, unknown codes `None`.
    pub fn from_code(code: u64) -> Option<Rule> {
        Some(match code {
            0 => Rule::Elementwise,
            1 => Rule::NonfiniteInvented,
            2 => Rule::DropsNan,
            3 => Rule::DropsInf,
            4 => Rule::InfSign,
            5 => Rule::NanInfKind,
            _ => return None,
        })
    }
}

impl std::fmt::Display for Rule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How an element with a non-finite reference or candidate is judged (at least one of `c`,
/// `r` is NaN or ±Inf). `alt` is `None` without an alternative reference (every family but
/// `nan-inf`: the strict rule), else `Some(a)` with `a` the value the reference takes at this
/// element when the injected non-finite inputs are replaced by finite probes, NaN where the
/// element depends on them.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Nonfinite {
    /// Same NaN/Inf (or NaN against Inf in the `nan-inf` family).
    Pass,
    /// The candidate is finite where the reference's NaN/Inf is an artefact of its
    /// algorithm (e.g. `0·NaN`), within tolerance of the probe value.
    Artefact,
    Fail(Rule),
}

/// The NaN/Inf rules (README, "NaN and Inf"); `within(c, a)` is the elementwise tolerance.
#[inline]
pub(crate) fn judge_nonfinite(
    c: f64,
    r: f64,
    alt: Option<f64>,
    within: impl Fn(f64, f64) -> bool,
) -> Nonfinite {
    use Nonfinite::*;
    if r.is_finite() {
        return Fail(Rule::NonfiniteInvented);
    }
    let rescued_by_alt =
        || matches!(alt, Some(a) if a.is_finite() && c.is_finite() && within(c, a));
    if r.is_nan() {
        return if c.is_nan() {
            Pass
        } else if c.is_infinite() {
            if alt.is_some() {
                Pass
            } else {
                Fail(Rule::NanInfKind)
            }
        } else if rescued_by_alt() {
            Artefact
        } else {
            Fail(Rule::DropsNan)
        };
    }
    // r is ±Inf.
    if c == r {
        Pass
    } else if c == -r {
        Fail(Rule::InfSign)
    } else if c.is_nan() {
        if alt.is_some() {
            Pass
        } else {
            Fail(Rule::NanInfKind)
        }
    } else if rescued_by_alt() {
        Artefact
    } else {
        Fail(Rule::DropsInf)
    }
}
