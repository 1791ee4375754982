//! How much memory a timing phase spends per side beyond one call's buffers, and on what:
//! source sets drawn ahead ([`stage_ahead`]) and placements used in turn ([`placements`]).
//! Budgets only: `exchange` allocates what they say.

/// Bytes of source sets drawn ahead at most: a problem whose inputs are larger draws one
/// call at a time.
pub(crate) const STAGE_AHEAD_BYTES: u64 = 512 << 20;

/// How many calls' inputs the reference draws at a time, for `calls` calls of `input_bytes`
/// each: as many as [`STAGE_AHEAD_BYTES`] holds (at least one), or one when calls release
/// their memory (a case that large has no memory to spare).
///
/// Drawing ahead is what keeps the sides alike on the CPU: a draw between every pair of
/// calls ran the reference's process just before its windows, and on 2 cores that made it
/// the faster side (level-1 problem 10, the reference timed as its own candidate: 0.90-0.96
/// drawing every call, 0.96-1.05 drawing once). On a GPU it saves a request, a thaw and a
/// freeze per call. The sets lie in the reference's buffers, which the candidate never
/// maps, so drawing ahead shows it nothing early.
pub(crate) fn stage_ahead(input_bytes: u64, calls: usize, release_calls: bool) -> usize {
    if input_bytes == 0 {
        return calls.max(1);
    }
    if release_calls {
        return 1;
    }
    ((STAGE_AHEAD_BYTES / input_bytes) as usize).clamp(1, calls.max(1))
}

/// Bytes each side may spend on spreading its calls over placements, for the further staged
/// sets and, apart, for the outputs its worker keeps.
pub(crate) const PLACEMENT_BYTES: u64 = 512 << 20;

/// On a GPU, how many staged sets each side's calls use in turn, and how many of the latest
/// calls' outputs its worker keeps alive, for a case of `input_bytes` of tensor inputs and
/// `output_bytes` of outputs a call.
///
/// Why: where a call's memory lies moves its time. On an H200 a 3D transposed convolution
/// (level 1, problem 70) ran 29.0-29.4 ms with its inputs or outputs in most placements and
/// 30.2-30.5 ms in about one in four or eight, and a process keeps the placement it first
/// gets: the staged inputs are allocated once per phase, and the caching allocator hands a
/// call's outputs the block the call before freed. So each side drew one placement, and the
/// reference timed as its own candidate came out up to 4% off, steadily. Calls that use
/// staged sets in turn, with the latest outputs kept alive (the next call's are then
/// allocated in another block), spread each side over several placements, and the median of
/// its calls no longer rests on one draw.
///
/// A worker whose torch has allocator pools now also places its calls' temporaries and
/// outputs where they run fastest (`time_open`'s placement probe, PROTOCOL.md), and then
/// keeps no outputs: the held outputs count for a torch without pools. The staged sets still
/// spread the inputs.
///
/// The counts: up to 4 staged sets (1, 2 or 4) and 4 held outputs (0, 2 or 4: with 4 sets
/// the held outputs' 5 blocks and the 4 sets make 20 pairings, not 4), as far as
/// [`PLACEMENT_BYTES`] holds. None for calls that release their memory (a case that large
/// has no memory to spare) or on the CPU.
pub(crate) fn placements(input_bytes: u64, output_bytes: u64, release_calls: bool) -> (usize, u32) {
    if release_calls {
        return (1, 0);
    }
    let sets = if input_bytes == 0 {
        1
    } else {
        [4usize, 2, 1]
            .into_iter()
            .find(|&n| (n as u64 - 1) * input_bytes <= PLACEMENT_BYTES)
            .unwrap_or(1)
    };
    let hold = [4u32, 2, 0]
        .into_iter()
        .find(|&n| n as u64 * output_bytes <= PLACEMENT_BYTES)
        .unwrap_or(0);
    (sets, hold)
}

/// Whether a timing of a case with `inputs` and `outputs` bytes on a GPU of `total` bytes
/// releases memory after every call: when what it holds at once reaches half the card. The
/// harness holds the source inputs and both sides' staged inputs and output slots; each
/// worker its outputs, their contiguous copy and about as much again of temporaries and
/// cached blocks, kept while the other side is timed (on an 80 GB H100 the idle side's cached
/// blocks once left an honest candidate of level-1 problem 20, 6 GiB in and 6 GiB out, out of
/// memory). A released call reallocates its outputs: it opens with an untimed call
/// ([`crate::config::TimingConfig::opening_calls`]).
pub(crate) fn release_every_call(inputs: u64, outputs: u64, total: u64) -> bool {
    let need = 3 * inputs + 2 * outputs + 2 * 3 * outputs;
    total > 0 && need >= total / 2
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calls_are_drawn_ahead_as_far_as_the_budget_holds() {
        let mib = 1u64 << 20;
        // Small inputs: every call of the timing at once.
        assert_eq!(stage_ahead(mib, 25, false), 25);
        // The budget decides between one and all.
        assert_eq!(stage_ahead(100 * mib, 25, false), 5);
        // Larger than the budget, or calls that release their memory: one at a time.
        assert_eq!(stage_ahead(STAGE_AHEAD_BYTES + 1, 25, false), 1);
        assert_eq!(stage_ahead(mib, 25, true), 1);
        // No tensor inputs: nothing to hold, all at once; never zero sets.
        assert_eq!(stage_ahead(0, 25, true), 25);
        assert_eq!(stage_ahead(mib, 0, false), 1);
    }

    #[test]
    fn calls_spread_over_placements_as_far_as_the_budget_holds() {
        let mib = 1u64 << 20;
        // Small cases: four staged sets, four held outputs (5 output blocks against 4 sets).
        assert_eq!(placements(mib, mib, false), (4, 4));
        // The budget holds three further sets of 150 MiB, one of 300 MiB, none of 600 MiB;
        // four outputs of 128 MiB, two of 200 MiB, none of 300 MiB.
        assert_eq!(placements(150 * mib, 128 * mib, false), (4, 4));
        assert_eq!(placements(300 * mib, 200 * mib, false), (2, 2));
        assert_eq!(placements(600 * mib, 300 * mib, false), (1, 0));
        // No tensor inputs: one set; calls that release their memory: nothing kept.
        assert_eq!(placements(0, mib, false), (1, 4));
        assert_eq!(placements(mib, mib, true), (1, 0));
        // Never a held count whose blocks share the sets' period (1 + held is odd).
        for i in 0..40u64 {
            let (sets, hold) = placements(i * 37 * mib, i * 23 * mib, false);
            assert!(
                [1, 2, 4].contains(&sets) && [0, 2, 4].contains(&hold),
                "{i}"
            );
        }
    }

    #[test]
    fn large_cases_release_after_every_call() {
        let gib = 1u64 << 30;
        assert!(
            release_every_call(6 * gib, 6 * gib, 80 * gib),
            "L1/20 on an H100"
        );
        assert!(
            !release_every_call(6 * gib, 6 * gib, 141 * gib),
            "L1/20 on an H200"
        );
        assert!(!release_every_call(gib, gib, 80 * gib), "L1/70");
        assert!(
            !release_every_call(6 * gib, 6 * gib, 0),
            "no GPU: nothing to release"
        );
    }
}
