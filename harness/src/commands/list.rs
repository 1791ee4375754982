//! `kbench list`: the problems of a suite, one per line (level, id, name).

use anyhow::Result;

use crate::cli::ListArgs;
use crate::commands::run_config::load_suite;
use crate::exit;

pub fn command(a: ListArgs) -> Result<i32> {
    let problems = load_suite(&a.suite)?;
    for p in problems {
        println!("{}\t{}\t{}", p.level, p.id, p.name);
    }
    Ok(exit::OK)
}
