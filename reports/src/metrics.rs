//! The metrics of each paper, over tasks, per level and overall. Pure functions.
//!
//! Definitions (from each paper and KernelBench's analysis script; each differs):
//!
//! - **KernelBench** (`scripts/benchmark_eval_analysis.py`): fast_p = #{correct and
//!   speedup above p} / #tasks, strict `>`, p ∈ {0, 0.5, 0.8, 1, 1.5, 2}; fast_0 is the
//!   correctness rate; geometric mean speedup over correct tasks only. Its analysis reads
//!   `sample_id == 0` only ([`crate::task::Pick::FirstSample`]) and prints pass@k
//!   ([`pass_at_k`]) when there are several samples.
//! - **CudaForge** (arXiv 2511.01884, Tables 1–2): per task the best correct speedup,
//!   0 when no kernel is correct; Perf = mean, Median and 75% over **all** tasks (zeros
//!   included, numpy linear percentiles); Fast1 = share of all tasks with best > 1.
//! - **CUDA Agent** (arXiv 2602.24286 §4.1): Pass rate; Faster rate vs eager / compile =
//!   correct and faster (`>`), over all tasks; Speed-up = geometric mean over correct tasks
//!   per level; Overall = level geomeans weighted by task count (100/100/50).
//! - **Kevin** (arXiv 2507.11948 §3.1, §5): per trajectory the fastest correct kernel's eager
//!   speedup, 0 if none; best@k = max over trajectories, avg@k = mean over them; then the
//!   arithmetic mean over tasks. Its fast_p uses `≥ p`.

use serde::{Deserialize, Serialize};

use crate::stats::{bootstrap, weighted_geomean, Estimate, Rate, Statistic};
use crate::task::{Baseline, Task};

/// KernelBench's fast_p thresholds.
pub const FAST_P: [f64; 6] = [0.0, 0.5, 0.8, 1.0, 1.5, 2.0];
/// Thresholds of the fast_p curves: 0 to 3 in steps of 0.05.
pub fn curve_grid() -> Vec<f64> {
    (0..=60).map(|i| f64::from(i) * 0.05).collect()
}

/// fast_p at one threshold.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct FastP {
    pub p: f64,
    pub rate: Rate,
}

/// CudaForge's speedup summary over all tasks, failures as 0.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ZeroFilled {
    pub mean: Estimate,
    pub median: Estimate,
    pub p75: Estimate,
}

/// The metrics against one baseline.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BaselineMetrics {
    pub baseline: Baseline,
    /// Tasks with a correct candidate timed against this baseline.
    pub timed: usize,
    /// Tasks left out of this baseline's figures because it has no usable time for their
    /// problem ([`Task::baseline_missing`]): every rate and mean here is over the others.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub without_time: usize,
    /// KernelBench fast_p at [`FAST_P`] (strict `>`, over all tasks).
    pub fast_p: Vec<FastP>,
    /// `(p, fast_p)` over [`curve_grid`].
    pub curve: Vec<(f64, f64)>,
    /// CudaForge mean / median / p75 over all tasks with failures as 0.
    pub zero_filled: Option<ZeroFilled>,
    /// KernelBench / CUDA Agent geometric mean over timed correct tasks.
    pub geomean: Option<Estimate>,
    /// CUDA Agent's Overall: level geomeans weighted by task count (overall scope only).
    pub geomean_level_weighted: Option<f64>,
    /// Best correct speedups of the timed tasks, ascending (for distributions).
    pub speedups: Vec<f64>,
}

/// Kevin's best-of-k and average-of-k over trajectories.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct KevinMetrics {
    /// Most trajectories of any task (Kevin: 16).
    pub k: usize,
    pub correct_best: f64,
    pub correct_avg: f64,
    pub perf_best: f64,
    pub perf_avg: f64,
    /// `(p, best@k, avg@k)` share of trajectories with a correct kernel of speedup `≥ p`.
    pub fast: Vec<(f64, f64, f64)>,
}

/// Agent cost per task, over the tasks whose records carry a cost.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CostMetrics {
    pub tasks_with_cost: usize,
    pub tokens_per_task: Option<f64>,
    pub usd_per_task: Option<f64>,
    pub agent_wall_min_per_task: Option<f64>,
    pub gpu_min_per_task: Option<f64>,
    /// The harness's own evaluation time per task (all candidates), minutes; always known.
    pub eval_min_per_task: Option<f64>,
}

/// Every metric of one scope (a level, or all tasks).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ScopeMetrics {
    /// `L1`, `L2`, `L3`, ... or `all`.
    pub scope: String,
    pub level: Option<u8>,
    pub tasks: usize,
    pub candidates: usize,
    pub compiled: Rate,
    /// Correct on every case family.
    pub correct: Rate,
    /// Correct on the `random` family (KernelBench's check).
    pub correct_random: Rate,
    pub baselines: Vec<BaselineMetrics>,
    /// `(k, pass@k)` for k ∈ {1, 5, 10} where every task has at least k candidates.
    pub pass_at_k: Vec<(u32, f64)>,
    pub kevin: KevinMetrics,
    pub cost: CostMetrics,
}

impl ScopeMetrics {
    pub fn baseline(&self, b: Baseline) -> Option<&BaselineMetrics> {
        self.baselines.iter().find(|m| m.baseline == b)
    }
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

/// The tasks whose problem has a usable time for `baseline`: a speedup over a baseline with
/// no time is unknown, and counting it as 0 would understate the kernels. Eager is each
/// run's own reference, always there.
pub fn with_time<'a>(tasks: &[&'a Task], baseline: Baseline) -> Vec<&'a Task> {
    tasks
        .iter()
        .copied()
        .filter(|t| baseline == Baseline::Eager || t.baseline_missing(baseline).is_none())
        .collect()
}

fn count(tasks: &[&Task], pred: impl Fn(&Task) -> bool) -> Rate {
    Rate::wilson(tasks.iter().filter(|t| pred(t)).count(), tasks.len())
}

/// KernelBench fast_p: `#{tasks with a correct candidate of speedup > p} / #tasks`, over
/// the tasks whose problem has a time for `baseline` ([`with_time`]).
pub fn fast_p(tasks: &[&Task], baseline: Baseline, p: f64) -> Rate {
    let tasks = with_time(tasks, baseline);
    count(&tasks, |t| t.best(baseline).is_some_and(|(_, s)| s > p))
}

/// Metrics of `tasks` against `baseline`, over those whose problem has a time for it;
/// `None` when no candidate was timed against it.
pub fn baseline_metrics(tasks: &[&Task], baseline: Baseline) -> Option<BaselineMetrics> {
    let all = tasks.len();
    let tasks = &with_time(tasks, baseline)[..];
    let mut speedups: Vec<f64> = tasks
        .iter()
        .filter_map(|t| t.best(baseline).map(|(_, s)| s))
        .collect();
    if speedups.is_empty() && baseline != Baseline::Eager {
        return None;
    }
    speedups.sort_unstable_by(f64::total_cmp);
    let scores: Vec<f64> = tasks.iter().map(|t| t.score(baseline)).collect();
    let zero_filled = (!scores.is_empty()).then(|| ZeroFilled {
        mean: bootstrap(&scores, Statistic::Mean).expect("non-empty"),
        median: bootstrap(&scores, Statistic::Median).expect("non-empty"),
        p75: bootstrap(&scores, Statistic::P75).expect("non-empty"),
    });
    let positive: Vec<f64> = speedups.iter().copied().filter(|&s| s > 0.0).collect();
    Some(BaselineMetrics {
        baseline,
        timed: speedups.len(),
        without_time: all - tasks.len(),
        fast_p: FAST_P
            .iter()
            .map(|&p| FastP {
                p,
                rate: fast_p(tasks, baseline, p),
            })
            .collect(),
        curve: curve_grid()
            .into_iter()
            .map(|p| (p, fast_p(tasks, baseline, p).value))
            .collect(),
        zero_filled,
        geomean: bootstrap(&positive, Statistic::Geomean),
        geomean_level_weighted: None,
        speedups,
    })
}

/// A task's trajectories: (any kernel correct, best correct eager speedup or 0).
type Trajectories = [(bool, f64)];

/// The unbiased pass@k estimator of Chen et al. 2021 (HumanEval), as KernelBench prints
/// it: with n candidates of which c are correct, `1 − C(n−c, k) / C(n, k)`, computed as
/// `1 − Π_{i=n−c+1}^{n} (1 − k/i)`; 1 when `n − c < k`. `None` when `n < k`.
pub fn pass_at_k(n: usize, c: usize, k: usize) -> Option<f64> {
    if n < k || k == 0 {
        return None;
    }
    if n - c < k {
        return Some(1.0);
    }
    Some(
        1.0 - ((n - c + 1)..=n)
            .map(|i| 1.0 - k as f64 / i as f64)
            .product::<f64>(),
    )
}

/// Mean pass@k over tasks, for k ∈ {1, 5, 10} where every task has at least k candidates.
pub(crate) fn pass_at_k_over(tasks: &[&Task]) -> Vec<(u32, f64)> {
    [1u32, 5, 10]
        .into_iter()
        .filter_map(|k| {
            let per: Option<Vec<f64>> = tasks
                .iter()
                .map(|t| {
                    let c = t.candidates.iter().filter(|c| c.correct).count();
                    pass_at_k(t.candidates.len(), c, k as usize)
                })
                .collect();
            let per = per.filter(|p| !p.is_empty())?;
            Some((k, per.iter().sum::<f64>() / per.len() as f64))
        })
        .collect()
}

/// Kevin's metrics over `tasks` (eager baseline; fast_p with `≥`).
pub fn kevin_metrics(tasks: &[&Task]) -> KevinMetrics {
    let per_task: Vec<Vec<(bool, f64)>> = tasks.iter().map(|t| t.trajectories()).collect();
    let k = per_task.iter().map(Vec::len).max().unwrap_or(0);
    let mean = |f: &dyn Fn(&Trajectories) -> f64| {
        if per_task.is_empty() {
            0.0
        } else {
            per_task.iter().map(|t| f(t)).sum::<f64>() / per_task.len() as f64
        }
    };
    let avg = |t: &Trajectories, g: &dyn Fn(&(bool, f64)) -> f64| {
        if t.is_empty() {
            0.0
        } else {
            t.iter().map(g).sum::<f64>() / t.len() as f64
        }
    };
    let best =
        |t: &[(bool, f64)], g: &dyn Fn(&(bool, f64)) -> f64| t.iter().map(g).fold(0.0f64, f64::max);
    let correct = |x: &(bool, f64)| f64::from(u8::from(x.0));
    let perf = |x: &(bool, f64)| x.1;
    KevinMetrics {
        k,
        correct_best: mean(&|t| best(t, &correct)),
        correct_avg: mean(&|t| avg(t, &correct)),
        perf_best: mean(&|t| best(t, &perf)),
        perf_avg: mean(&|t| avg(t, &perf)),
        fast: [1.0, 1.5]
            .iter()
            .map(|&p| {
                let hit = move |x: &(bool, f64)| f64::from(u8::from(x.0 && x.1 >= p));
                (p, mean(&|t| best(t, &hit)), mean(&|t| avg(t, &hit)))
            })
            .collect(),
    }
}

fn cost_metrics(tasks: &[&Task]) -> CostMetrics {
    let per_task = |f: &dyn Fn(&crate::extras::Cost) -> Option<f64>| {
        let sums: Vec<f64> = tasks
            .iter()
            .filter_map(|t| {
                let v: Vec<f64> = t
                    .candidates
                    .iter()
                    .filter_map(|c| c.cost.as_ref().and_then(f))
                    .collect();
                (!v.is_empty()).then(|| v.iter().sum())
            })
            .collect();
        (!sums.is_empty()).then(|| sums.iter().sum::<f64>() / sums.len() as f64)
    };
    let eval: Vec<f64> = tasks
        .iter()
        .map(|t| t.candidates.iter().map(|c| c.eval_s).sum::<f64>() / 60.0)
        .collect();
    CostMetrics {
        tasks_with_cost: tasks
            .iter()
            .filter(|t| t.candidates.iter().any(|c| c.cost.is_some()))
            .count(),
        tokens_per_task: per_task(&|c| c.tokens),
        usd_per_task: per_task(&|c| c.usd),
        agent_wall_min_per_task: per_task(&|c| c.wall_s.map(|s| s / 60.0)),
        gpu_min_per_task: per_task(&|c| c.gpu_s.map(|s| s / 60.0)),
        eval_min_per_task: (!eval.is_empty()).then(|| eval.iter().sum::<f64>() / eval.len() as f64),
    }
}

/// Every metric of one scope.
pub fn scope_metrics(scope: &str, level: Option<u8>, tasks: &[&Task]) -> ScopeMetrics {
    ScopeMetrics {
        scope: scope.to_string(),
        level,
        tasks: tasks.len(),
        candidates: tasks.iter().map(|t| t.candidates.len()).sum(),
        compiled: count(tasks, Task::compiled),
        correct: count(tasks, Task::correct),
        correct_random: count(tasks, Task::correct_random),
        baselines: Baseline::ALL
            .iter()
            .filter_map(|&b| baseline_metrics(tasks, b))
            .collect(),
        pass_at_k: pass_at_k_over(tasks),
        kevin: kevin_metrics(tasks),
        cost: cost_metrics(tasks),
    }
}

/// Metrics per level (ascending) and then over all tasks (`all`). The overall scope also
/// gets CUDA Agent's level-weighted geomean: each level's geomean (over its correct tasks)
/// weighted by the level's task count.
pub fn metrics_by_level(tasks: &[Task]) -> Vec<ScopeMetrics> {
    let mut levels: Vec<u8> = tasks.iter().map(|t| t.level).collect();
    levels.sort_unstable();
    levels.dedup();
    let mut out: Vec<ScopeMetrics> = levels
        .iter()
        .map(|&l| {
            let of_level: Vec<&Task> = tasks.iter().filter(|t| t.level == l).collect();
            scope_metrics(&format!("L{l}"), Some(l), &of_level)
        })
        .collect();
    let all: Vec<&Task> = tasks.iter().collect();
    let mut overall = scope_metrics("all", None, &all);
    for b in overall.baselines.iter_mut() {
        let weighted: Vec<(f64, f64)> = out
            .iter()
            .filter_map(|s| {
                let g = s.baseline(b.baseline)?.geomean?;
                Some((g.value, s.tasks as f64))
            })
            .collect();
        b.geomean_level_weighted = weighted_geomean(&weighted);
    }
    out.push(overall);
    out
}

#[cfg(test)]
mod tests {
    use super::pass_at_k;
    use approx::assert_abs_diff_eq;

    #[test]
    fn pass_at_k_is_the_humaneval_estimator() {
        // n = 10, c = 3: pass@1 = c/n; pass@5 = 1 − C(7,5)/C(10,5) = 1 − 21/252.
        assert_abs_diff_eq!(pass_at_k(10, 3, 1).unwrap(), 0.3, epsilon = 1e-12);
        assert_abs_diff_eq!(
            pass_at_k(10, 3, 5).unwrap(),
            (1.0 - 21.0 / 252.0),
            epsilon = 1e-12
        );
        assert_eq!(pass_at_k(10, 8, 5), Some(1.0));
        assert_eq!(pass_at_k(10, 0, 5), Some(0.0));
        assert_eq!(pass_at_k(4, 1, 5), None);
    }
}
