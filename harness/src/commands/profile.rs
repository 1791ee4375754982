//! `kbench profile --problem P --kernel K`: profiles one kernel (`crate::measure::profile`)
//! and prints the report as a per-kernel table with the verdicts and the speed of light, or as
//! JSON with `--json`.

use anyhow::Result;
use kbench_record::Precision;

use crate::cli::{PrecisionArg, ProfileArgs};
use crate::measure::profile::{profile, ProfileConfig, ProfileReport};

/// The profiler's settings from the command line.
fn config(a: &ProfileArgs) -> ProfileConfig {
    ProfileConfig {
        problem: a.problem.clone(),
        kernel: a.kernel.clone(),
        device: a.device.clone(),
        precision: match a.precision {
            PrecisionArg::Fp32 => Precision::Fp32,
            PrecisionArg::Fp16 => Precision::Fp16,
            PrecisionArg::Bf16 => Precision::Bf16,
        },
        calls: a.calls,
        warmup: a.warmup,
        ncu: a.ncu.clone(),
        no_ncu: a.no_ncu,
        keep: a.keep.clone(),
        python: a.python.python.clone(),
    }
}

/// `kbench profile`: prints [`profile`]'s report as a table, or as JSON with `--json`.
pub fn command(a: &ProfileArgs) -> Result<i32> {
    let report = profile(&config(a))?;
    if a.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", render(&report));
    }
    Ok(crate::exit::OK)
}

fn sci(x: f64) -> String {
    if x == 0.0 {
        "0".into()
    } else {
        format!("{x:.3e}")
    }
}

fn us(s: f64) -> String {
    format!("{:.2}", s * 1e6)
}

fn short(name: &str, n: usize) -> String {
    if name.chars().count() <= n {
        name.to_string()
    } else {
        let s: String = name.chars().take(n - 1).collect();
        format!("{s}…")
    }
}

/// The report as text: a per-kernel table, the verdicts, the speed of light.
pub(crate) fn render(r: &ProfileReport) -> String {
    let mut out = format!(
        "{} · {} · {} ({}) · {} calls · source: {}\n",
        r.problem, r.kernel, r.device, r.device_name, r.calls, r.source
    );
    if let Some(why) = &r.fallback_reason {
        out.push_str(&format!(
            "NOTE: not profiled with Nsight Compute: {why}. Falling back to the PyTorch profiler: {}; no hardware counters, no roofline verdict.\n",
            if r.device == "cpu" {
                "CPU times of aten operators (these are CPU numbers, not GPU kernels)"
            } else {
                "kernel names and device times only"
            }
        ));
    }
    out.push('\n');
    if let Some(n) = &r.ncu {
        out.push_str(&format!(
            "{:<48} {:>6} {:>10} {:>6} {:>10} {:>10} {:>8} {:>6}  verdict\n",
            "kernel", "n/call", "us/launch", "share", "DRAM MB", "GFLOP", "FLOP/B", "occ%"
        ));
        for k in &n.kernels {
            let c = &k.counters;
            out.push_str(&format!(
                "{:<48} {:>6.1} {:>10} {:>5.1}% {:>10.3} {:>10.4} {:>8} {:>6} {}\n",
                short(&k.name, 48),
                k.launches_per_call,
                us(c.duration_s),
                100.0 * k.share,
                c.dram_bytes() / 1e6,
                c.total_flops() / 1e9,
                k.verdict
                    .as_ref()
                    .and_then(|v| v.arithmetic_intensity)
                    .map_or("-".into(), |x| format!("{x:.2}")),
                c.achieved_occupancy_pct
                    .map_or("-".into(), |x| format!("{x:.1}")),
                k.verdict
                    .as_ref()
                    .map_or("-".to_string(), |v| v.bound.to_string()),
            ));
        }
        out.push_str(&format!(
            "\nper call: {} us of GPU time in {} launches, DRAM {:.3} MB, {:.4} GFLOP\n",
            us(n.per_call.duration_s),
            n.launches as f64 / n.calls.max(1) as f64,
            n.per_call.dram_bytes() / 1e6,
            n.per_call.total_flops() / 1e9
        ));
        for k in &n.kernels {
            if let Some(v) = &k.verdict {
                out.push_str(&format!("\n{}:\n{v}", short(&k.name, 100)));
            }
        }
        if let Some(v) = &n.per_call_verdict {
            out.push_str(&format!("\nwhole call:\n{v}"));
        }
        if !n.dropped_metrics.is_empty() {
            out.push_str(&format!(
                "\nmetrics this ncu does not know (left out): {}\n",
                n.dropped_metrics.join(", ")
            ));
        }
    } else {
        out.push_str(&format!(
            "{:<60} {:>11} {:>7} {:>12} {:>10}\n",
            "name", "kind", "count", "total us", "us/call"
        ));
        for e in &r.torch_events {
            out.push_str(&format!(
                "{:<60} {:>11} {:>7} {:>12.1} {:>10.2}\n",
                short(&e.name, 60),
                e.kind,
                e.count,
                e.total_us,
                e.total_us / r.calls.max(1) as f64
            ));
        }
    }
    if let Some(w) = r.wall_s_per_call {
        out.push_str(&format!(
            "\nwall time per call (host, measured before profiling, no profiler active): {} us\n",
            us(w)
        ));
    }
    if let Some(c) = &r.cost {
        out.push_str(&format!(
            "problem cost (reference, counted once): {} FLOP ({}), {:.3} MB moved (inputs {:.3}, weights {:.3}, outputs {:.3})\n",
            sci(c.flops),
            c.precision,
            c.bytes() / 1e6,
            c.input_bytes / 1e6,
            c.weight_bytes / 1e6,
            c.output_bytes / 1e6
        ));
        if r.peaks.is_none() {
            if let Some(w) = r.wall_s_per_call.filter(|w| *w > 0.0) {
                out.push_str(&format!(
                    "achieved on {}: {} FLOP/s, {:.3} GB/s (problem cost / wall time per call; {} has no peaks in kbench's table, so no speed of light)\n",
                    r.device,
                    sci(c.flops / w),
                    c.bytes() / w / 1e9,
                    if r.device == "cpu" { "a CPU" } else { "this GPU" }
                ));
            }
        }
    }
    if let Some(p) = &r.peaks {
        out.push_str(&format!("peaks: {}\n", p.describe()));
    }
    if let Some(s) = &r.speed_of_light {
        out.push_str(&format!("{s}\n"));
        if let Some(x) = r.sol_ratio {
            out.push_str(&format!(
                "this kernel takes {x:.2}x the speed of light{}\n",
                if r.ncu.is_some() {
                    " (GPU time per call under ncu)"
                } else {
                    " (wall time per call)"
                }
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::measure::profile::{aggregate, parse_ncu_raw_csv};
    use crate::test_support::{h100, h100_ncu_report};

    const MATMUL: &str = include_str!("../../../tests/fixtures/ncu/matmul_bf16.csv");

    #[test]
    fn matmul_profile_renders_and_has_the_json_keys_the_gpu_profile_script_reads() {
        let p = aggregate(&parse_ncu_raw_csv(MATMUL).unwrap(), 3, Some(&h100()));
        let report = h100_ncu_report("level1/1_Square_matrix_multiplication_.py", p);
        let text = render(&report);
        println!("{text}");
        assert!(text.contains("compute-bound"), "{text}");
        // The JSON keys `tests/gpu/profiling.sh ncu` reads.
        let v = serde_json::to_value(&report).unwrap();
        let k0 = &v["ncu"]["kernels"][0];
        assert_eq!(k0["verdict"]["bound"], "compute-bound");
        assert!(k0["verdict"]["bandwidth_fraction"].is_f64());
        assert!(k0["counters"]["achieved_occupancy_pct"].is_f64());
        assert!(k0["launches_per_call"].is_f64());
        assert_eq!(
            v["ncu"]["per_call"]["flops"]["bf16_tensor"].as_f64(),
            Some(2.0 * 4096f64.powi(3))
        );
        assert!(v["ncu"]["per_call_verdict"]["bound"].is_string());
        assert!(v["ncu"]["dropped_metrics"].is_array());
        if let Some(path) = std::env::var_os("KBENCH_DUMP_PROFILE_JSON") {
            std::fs::write(path, serde_json::to_vec_pretty(&v).unwrap()).unwrap();
        }
        assert!(text.contains("whole call:"), "{text}");
        assert!(!text.contains("NOTE"), "{text}");
    }
}
