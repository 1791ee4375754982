//! Arguments of `kbench fake-llm`: the scripted chat server for tests and dry runs.

use std::path::PathBuf;

use clap::Args;

#[derive(Debug, Args)]
pub struct FakeLlmArgs {
    /// The script: JSON with per-model lists of replies (see harness/src/fakellm.rs).
    #[arg(long, value_name = "FILE")]
    pub script: PathBuf,
    /// Port on 127.0.0.1 (0: any free port).
    #[arg(long, default_value_t = 0)]
    pub port: u16,
    /// Write the base URL here once listening.
    #[arg(long, value_name = "FILE")]
    pub url_file: Option<PathBuf>,
    /// Append every request received here, one JSON line each.
    #[arg(long, value_name = "FILE")]
    pub log: Option<PathBuf>,
}
