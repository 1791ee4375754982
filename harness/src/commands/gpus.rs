//! `kbench gpus`: the GPUs this host shows, as a table or JSON (and why none, when none).

use anyhow::Result;

use crate::cli::GpusArgs;
use crate::exit;

pub fn command(a: GpusArgs) -> Result<i32> {
    match crate::gpu::listing() {
        Ok(listing) if a.json => println!("{}", serde_json::to_string_pretty(&listing)?),
        Ok(listing) => print!("{}", crate::gpu::render_listing(&listing)),
        Err(why) if a.json => println!(
            "{}",
            serde_json::json!({
                "gpus": [],
                "why": why.why_none(),
                "driver_version": crate::gpu::nvml::driver_version(),
                "cuda_driver_version": crate::gpu::cuda_driver_version(),
                "nvml_unavailable": crate::gpu::nvml::unavailable_reason(),
            })
        ),
        Err(why) => println!("no GPU: {}", why.why_none()),
    }
    Ok(exit::OK)
}
