//! `kbench gpus`: the driver's static properties ([`describe`]) with NVML's live state, and
//! the table it prints (built as a string here; the command prints it). Imports
//! `gpu::inventory` and `gpu::nvml` of the harness.

use crate::gpu::inventory::{cuda_driver_version, describe, GpuInfo, GpuInventory};
use crate::gpu::nvml::LiveState;

fn render_table(rows: &[(&GpuInfo, Option<&LiveState>)], live: bool) -> String {
    let mut s = format!(
        "{:<3} {:<28} {:>5} {:>5} {:>9} {:>7} {:>9} {:>9} {:>6} {:>9}",
        "gpu", "name", "cc", "SMs", "memory", "L2", "SM clock", "mem clock", "bus", "peak BW"
    );
    if live {
        s.push_str(&format!(" {:>8} {:>5} {:>5}", "SM now", "temp", "util"));
    }
    s.push('\n');
    for (g, state) in rows {
        s.push_str(&format!(
            "{:<3} {:<28} {:>5} {:>5} {:>6.1}GiB {:>4}MiB {:>6}MHz {:>6}MHz {:>3}bit {:>5.0}GB/s",
            g.index,
            g.name,
            format!("{}.{}", g.compute_capability.0, g.compute_capability.1),
            g.sms,
            g.memory_bytes as f64 / (1u64 << 30) as f64,
            g.l2_bytes / (1 << 20),
            g.sm_clock_khz / 1000,
            g.memory_clock_khz / 1000,
            g.memory_bus_bits,
            g.peak_bandwidth_gbs()
        ));
        if live {
            let show =
                |v: Option<u32>, unit: &str| v.map_or("-".to_string(), |v| format!("{v}{unit}"));
            let st = |f: fn(&LiveState) -> Option<u32>| state.and_then(f);
            s.push_str(&format!(
                " {:>8} {:>5} {:>5}",
                show(st(|l| l.sm_clock_mhz), "MHz"),
                show(st(|l| l.temp_c), "C"),
                show(st(|l| l.util_pct), "%"),
            ));
        }
        s.push('\n');
    }
    s
}

/// One device as `kbench gpus` shows it.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub(crate) struct GpuEntry {
    #[serde(flatten)]
    pub(crate) info: GpuInfo,
    /// NVML's view now (clocks, temperature, utilisation, memory, power); None without NVML
    /// or when NVML has no device with this UUID.
    pub(crate) live: Option<LiveState>,
    /// Peak rates from the architecture table ([`GpuInfo::peaks`]); None outside it.
    pub(crate) peaks: Option<kbench_record::perf::Peaks>,
}

/// What `kbench gpus` prints.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub(crate) struct GpuListing {
    pub(crate) gpus: Vec<GpuEntry>,
    /// The NVIDIA driver's version from NVML, e.g. "580.65.06"; None without NVML.
    pub(crate) driver_version: Option<String>,
    /// The CUDA version the driver supports, e.g. "13.0".
    pub(crate) cuda_driver_version: Option<String>,
    /// Why NVML cannot be used; None when it can.
    pub(crate) nvml_unavailable: Option<String>,
}

/// Every visible device with its static properties and, where NVML works, its live state.
pub(crate) fn listing() -> Result<GpuListing, GpuInventory> {
    let infos = describe()?;
    let nvml_unavailable = crate::gpu::nvml::unavailable_reason();
    let gpus = infos
        .into_iter()
        .map(|info| {
            let live = if nvml_unavailable.is_none() {
                crate::gpu::nvml::live(info.uuid.as_str())
            } else {
                None
            };
            let peaks = info.peaks();
            GpuEntry { info, live, peaks }
        })
        .collect();
    Ok(GpuListing {
        gpus,
        driver_version: crate::gpu::nvml::driver_version(),
        cuda_driver_version: cuda_driver_version(),
        nvml_unavailable,
    })
}

/// [`listing`] as a table, with a last line about the driver and NVML.
pub(crate) fn render_listing(l: &GpuListing) -> String {
    let rows: Vec<(&GpuInfo, Option<&LiveState>)> =
        l.gpus.iter().map(|g| (&g.info, g.live.as_ref())).collect();
    let mut s = render_table(&rows, l.nvml_unavailable.is_none());
    for g in &l.gpus {
        match &g.peaks {
            Some(p) => s.push_str(&format!("gpu {} peaks: {}\n", g.info.index, p.describe())),
            None => s.push_str(&format!(
                "gpu {} peaks: compute capability {}.{} is not in kbench's table (Ampere to Blackwell)\n",
                g.info.index, g.info.compute_capability.0, g.info.compute_capability.1
            )),
        }
    }
    let cuda = l
        .cuda_driver_version
        .as_deref()
        .map(|v| format!(", CUDA {v}"))
        .unwrap_or_default();
    match (&l.nvml_unavailable, &l.driver_version) {
        (Some(why), _) => s.push_str(&format!("NVML: not available ({why}){cuda}\n")),
        (None, Some(v)) => s.push_str(&format!("NVML: driver {v}{cuda}\n")),
        (None, None) => s.push_str(&format!("NVML: driver version unknown{cuda}\n")),
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listing_explains_nvml_and_keeps_the_table_columns() {
        let g = GpuInfo {
            index: 0,
            name: "NVIDIA H100 80GB HBM3".into(),
            uuid: "GPU-1a2b3c4d-5e6f-7081-92a3-b4c5d6e7f809".into(),
            compute_capability: (9, 0),
            sms: 132,
            memory_bytes: 85_520_809_984,
            l2_bytes: 52_428_800,
            shared_memory_per_sm_bytes: 233_472,
            sm_clock_khz: 1_980_000,
            memory_clock_khz: 2_619_000,
            memory_bus_bits: 5120,
        };
        let without = GpuListing {
            gpus: vec![GpuEntry {
                peaks: g.peaks(),
                info: g.clone(),
                live: None,
            }],
            driver_version: None,
            cuda_driver_version: Some("13.0".into()),
            nvml_unavailable: Some("cannot load libnvidia-ml.so.1".into()),
        };
        let t = render_listing(&without);
        assert!(t.contains("SMs") && t.contains("peak BW"), "{t}");
        assert!(!t.contains("SM now"), "{t}");
        assert!(
            t.contains("NVML: not available (cannot load libnvidia-ml.so.1), CUDA 13.0"),
            "{t}"
        );
        let v = serde_json::to_value(&without).unwrap();
        assert_eq!(v["gpus"][0]["live"], serde_json::Value::Null);
        assert_eq!(v["gpus"][0]["sms"], 132);
        assert_eq!(v["driver_version"], serde_json::Value::Null);

        let live = LiveState {
            uuid: g.uuid.clone(),
            nvml_index: 3,
            sm_clock_mhz: Some(1755),
            mem_clock_mhz: Some(2619),
            temp_c: Some(41),
            power_w: Some(70.5),
            util_pct: Some(0),
            mem_util_pct: Some(0),
            mem_used_bytes: Some(1 << 20),
            mem_total_bytes: Some(85_520_809_984),
            driver_version: Some("580.65.06".into()),
        };
        let with = GpuListing {
            gpus: vec![GpuEntry {
                peaks: g.peaks(),
                info: g,
                live: Some(live),
            }],
            driver_version: Some("580.65.06".into()),
            cuda_driver_version: Some("13.0".into()),
            nvml_unavailable: None,
        };
        let t = render_listing(&with);
        assert!(
            t.contains("SM now") && t.contains("1755MHz") && t.contains("41C"),
            "{t}"
        );
        assert!(t.contains("NVML: driver 580.65.06, CUDA 13.0"), "{t}");
        assert!(t.contains("gpu 0 peaks: Hopper (sm90)"), "{t}");
        assert!(t.contains("FP16/BF16 989.4 TF"), "{t}");
        let v = serde_json::to_value(&with).unwrap();
        assert_eq!(v["gpus"][0]["live"]["sm_clock_mhz"], 1755);
        assert_eq!(v["driver_version"], "580.65.06");
    }

    #[test]
    fn listing_never_panics() {
        match listing() {
            Ok(l) => {
                println!("{}", render_listing(&l));
                assert!(!l.gpus.is_empty());
            }
            Err(why) => assert!(why.why_none().contains("--device cpu")),
        }
    }
}
