//! `kbench list`: the problems of a suite, one per line (level, id, name); a problem file
//! that cannot be loaded is listed in its place, marked `[problem_error: ...]`.

use anyhow::Result;

use crate::cli::ListArgs;
use crate::commands::run_config::load_suite;
use crate::exit;

pub fn command(a: ListArgs) -> Result<i32> {
    let suite = load_suite(&a.suite)?;
    let mut lines: Vec<((u8, u32), String)> = suite
        .problems
        .iter()
        .map(|p| {
            (
                (p.level, p.id),
                format!("{}\t{}\t{}", p.level, p.id, p.name),
            )
        })
        .collect();
    lines.extend(suite.broken.iter().map(|b| {
        let line = format!("{}\t{}\t{}\t[problem_error: {b}]", b.level, b.id, b.name);
        ((b.level, b.id), line)
    }));
    if !suite.broken.is_empty() {
        // Broken files only come from KernelBench levels, which load sorted by (level, id).
        lines.sort_by_key(|(k, _)| *k);
    }
    for (_, line) in lines {
        println!("{line}");
    }
    Ok(exit::OK)
}
