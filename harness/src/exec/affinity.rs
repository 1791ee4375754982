//! CPU cores kept for timing. A launch-bound kernel (level 3's ResNet18 and ViT: 2–3 ms of
//! Python launching small kernels) is timed as much by the CPU as by the GPU. On a 16-vCPU
//! H100 host the two sides of one self-timed problem drifted between a fast and a 2× slower
//! state per process, for several rounds at a time, so the reference and the candidate ran
//! on differently loaded cores. Each GPU executor therefore gets one core of its own: the
//! harness (and every worker, which inherits its mask) stays off it, and both timing workers
//! move onto it only for the `time` command.

use nix::sched::{sched_getaffinity, sched_setaffinity, CpuSet};
use nix::unistd::Pid;

/// Reserves one core per executor (the highest-numbered allowed ones) when the host has at
/// least `2 × executors + 2` allowed cores, and takes the calling thread, hence every thread
/// and process it starts later, off them. Returns the core for each executor, or `None`
/// each where the host is too small to spare cores (timing then runs wherever it lands).
pub(crate) fn reserve_timing_cores(executors: usize) -> Vec<Option<usize>> {
    let none = vec![None; executors];
    let Ok(allowed) = sched_getaffinity(Pid::from_raw(0)) else {
        return none;
    };
    let cores: Vec<usize> = (0..CpuSet::count())
        .filter(|i| allowed.is_set(*i).unwrap_or(false))
        .collect();
    if executors == 0 || cores.len() < 2 * executors + 2 {
        return none;
    }
    let reserved: Vec<usize> = cores.iter().rev().take(executors).copied().collect();
    let mut rest = CpuSet::new();
    for c in cores.iter().filter(|c| !reserved.contains(c)) {
        if rest.set(*c).is_err() {
            return none;
        }
    }
    if sched_setaffinity(Pid::from_raw(0), &rest).is_err() {
        return none;
    }
    reserved.into_iter().map(Some).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reserved_cores_are_left_by_the_caller() {
        // Runs on a thread of its own: the mask is per thread and must not leak into others.
        std::thread::spawn(|| {
            let before = sched_getaffinity(Pid::from_raw(0)).unwrap();
            let n = (0..CpuSet::count())
                .filter(|i| before.is_set(*i).unwrap_or(false))
                .count();
            let got = reserve_timing_cores(1);
            let after = sched_getaffinity(Pid::from_raw(0)).unwrap();
            if n >= 4 {
                let core = got[0].expect("a core is reserved on a host with 4+ cores");
                assert!(before.is_set(core).unwrap());
                assert!(!after.is_set(core).unwrap(), "the caller left core {core}");
            } else {
                assert_eq!(got, vec![None]);
                assert!((0..CpuSet::count()).all(|i| before.is_set(i).ok() == after.is_set(i).ok()));
            }
            // Too many executors for the host: nothing is reserved and the mask is unchanged.
            let again = sched_getaffinity(Pid::from_raw(0)).unwrap();
            assert_eq!(reserve_timing_cores(CpuSet::count()), vec![None; CpuSet::count()]);
            let still = sched_getaffinity(Pid::from_raw(0)).unwrap();
            assert!((0..CpuSet::count()).all(|i| again.is_set(i).ok() == still.is_set(i).ok()));
        })
        .join()
        .unwrap();
    }
}
