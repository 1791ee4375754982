//! The reference cases a session keeps for its problem's later candidates: kept in case
//! order while the whole set, estimated from the case at hand, fits the session's budget
//! (GPU memory for device cases, host memory otherwise); once one does not, none is kept and
//! every candidate has its cases made again (same seeds, same inputs).

use std::sync::Arc;

use super::ref_case::RefCase;

pub(crate) struct KeptCases {
    cases: Vec<Arc<RefCase>>,
    /// Still keeping: every case so far fitted.
    keeping: bool,
    bytes: u64,
    budget: u64,
}

impl KeptCases {
    pub(crate) fn new(budget: u64) -> Self {
        KeptCases {
            cases: Vec::new(),
            keeping: true,
            bytes: 0,
            budget,
        }
    }

    /// Case `t`, when kept.
    pub(crate) fn get(&self, t: u32) -> Option<&Arc<RefCase>> {
        self.cases.get(t as usize)
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.cases.is_empty()
    }

    /// Offers case `t` of `bytes` (made now, or known not to apply: no tensors) out of
    /// `total` cases: kept when it is the next in order and the whole set, at this case's
    /// size, fits what is left of the budget; otherwise nothing is kept from now on.
    pub(crate) fn offer(&mut self, t: u32, rc: &Arc<RefCase>, bytes: u64, total: u32) {
        if !self.keeping {
            return;
        }
        let left = u64::from(total.saturating_sub(t));
        if t as usize == self.cases.len() && self.bytes + bytes.saturating_mul(left) <= self.budget
        {
            self.bytes += bytes;
            self.cases.push(Arc::clone(rc));
        } else {
            self.stop();
        }
    }

    /// Drops the kept cases and keeps none from now on (they did not fit on the GPU).
    pub(crate) fn stop(&mut self) {
        self.keeping = false;
        self.clear();
    }

    /// Drops the kept cases (a session idle beside an evaluation that needs the memory);
    /// the next candidate keeps them again from its first case.
    pub(crate) fn clear(&mut self) {
        self.cases.clear();
        self.bytes = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kbench_record::{CaseFamily, CaseRef};

    fn case(t: u32) -> Arc<RefCase> {
        let family = if t < 2 {
            CaseFamily::Random
        } else {
            CaseFamily::Small
        };
        Arc::new(RefCase::not_applicable(
            CaseRef { family, index: t },
            "in these tests only the bytes offered count".into(),
        ))
    }

    /// Offers cases 0..total in order, each of `bytes`; case `na` (if any) has none.
    fn offer_all(k: &mut KeptCases, total: u32, bytes: u64, na: Option<u32>) {
        for t in 0..total {
            if k.get(t).is_none() {
                let b = if Some(t) == na { 0 } else { bytes };
                k.offer(t, &case(t), b, total);
            }
        }
    }

    #[test]
    fn cases_are_kept_while_the_whole_set_fits() {
        let mut k = KeptCases::new(1000);
        offer_all(&mut k, 5, 200, None);
        assert!((0..5).all(|t| k.get(t).is_some()));
        let mut k = KeptCases::new(999);
        offer_all(&mut k, 5, 200, None);
        assert!(
            k.is_empty(),
            "the set at 200 each does not fit 999: none kept"
        );
        // Out of order: nothing is kept from then on.
        let mut k = KeptCases::new(1000);
        k.offer(1, &case(1), 10, 5);
        k.offer(0, &case(0), 10, 5);
        assert!(k.is_empty());
    }

    /// A session idle beside an evaluation that needed the memory drops its cases; its next
    /// candidate keeps them again, past a case that does not apply (offered without tensors).
    #[test]
    fn a_cleared_set_is_kept_again_in_order_past_a_case_that_does_not_apply() {
        let mut k = KeptCases::new(1000);
        offer_all(&mut k, 6, 100, Some(3));
        assert!((0..6).all(|t| k.get(t).is_some()));
        k.clear();
        assert!(k.is_empty());
        offer_all(&mut k, 6, 100, Some(3));
        assert!(
            (0..6).all(|t| k.get(t).is_some()),
            "kept again after a clear"
        );
        // Skipping the case that does not apply (not offered) would stop keeping for good.
        k.clear();
        for t in (0..6).filter(|t| *t != 3) {
            k.offer(t, &case(t), 100, 6);
        }
        assert!(k.is_empty() && k.get(0).is_none());
        offer_all(&mut k, 6, 100, None);
        assert!(k.is_empty(), "stopped: never kept again");
    }
}
