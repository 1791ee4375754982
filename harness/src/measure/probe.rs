//! The probe references of `nan-inf` cases as they arrive from the reference worker
//! (tensors `outalt:<k>`, PROTOCOL.md "Probe references"), placed by output index.

/// The probe references of a `nan-inf` case (PROTOCOL.md, `make_case`: tensors
/// `outalt:<k>`, one per floating output): the reference's outputs with the injected
/// non-finite inputs replaced by finite probes, NaN where an element depends on them. Placed
/// by output index; `None` when the worker sent none (every other family).
pub(crate) fn probe_slots<T>(alts: Vec<(usize, T)>, outputs: usize) -> Option<Vec<Option<T>>> {
    if alts.is_empty() {
        return None;
    }
    let mut slots: Vec<Option<T>> = (0..outputs).map(|_| None).collect();
    for (k, t) in alts {
        if let Some(s) = slots.get_mut(k) {
            *s = Some(t);
        }
    }
    Some(slots)
}

/// `k` of a tensor named `outalt:<k>`.
pub(crate) fn alt_index(name: &str) -> Option<usize> {
    name.strip_prefix("outalt:")?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_follow_the_output_index() {
        assert_eq!(probe_slots::<u8>(Vec::new(), 3), None);
        assert_eq!(
            probe_slots(vec![(2, 'c'), (0, 'a'), (7, 'x')], 3),
            Some(vec![Some('a'), None, Some('c')])
        );
        assert_eq!(alt_index("outalt:12"), Some(12));
        assert_eq!(alt_index("out:1"), None);
        assert_eq!(alt_index("outalt:x"), None);
    }
}
