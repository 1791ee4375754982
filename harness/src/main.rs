//! `kbench`: a thin dispatcher. The work happens in the library; exit codes are in `exit`.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use anyhow::{Context, Result};
use clap::Parser;
use kbench::cli::{
    BaselinesArgs, BaselinesCommand, BasisArg, Cli, Command, DemoArgs, GpusArgs, LeaderboardArgs,
    ListArgs, MergeArgs, PickArg, ReportArgs, RunArgs, SetupArgs, TableArg,
};
use kbench::commands::baselines;
use kbench::config::{self, RunConfig};
use kbench::exec as engine;
use kbench::exit;
use kbench::worker::python::{self, PythonChoice};

fn main() {
    let cli = Cli::parse();
    let code = match dispatch(cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("kbench: error: {e:#}");
            exit::HARNESS_ERROR
        }
    };
    std::process::exit(code);
}

fn dispatch(cli: Cli) -> Result<i32> {
    match cli.command {
        Command::Setup(a) => setup(a),
        Command::List(a) => list(a),
        Command::Gpus(a) => gpus(a),
        Command::Run(a) => run(*a),
        Command::Demo(a) => demo(a),
        Command::Report(a) => report(a),
        Command::Leaderboard(a) => leaderboard(a),
        Command::Slurm(a) => kbench::commands::slurm::command(&a),
        Command::Merge(a) => merge(a),
        Command::Baselines(a) => baselines_cmd(a),
        Command::Check(a) => kbench::commands::check::command(&a, install_stop_flag()),
        Command::Audit(a) => kbench::commands::audit::command(&a, install_stop_flag()),
        Command::FakeLlm(a) => kbench::llm::fake_server::command(
            &a.script,
            a.port,
            a.url_file.as_deref(),
            a.log.as_deref(),
        ),
        Command::Profile(a) => kbench::commands::profile::command(&a),
    }
}

fn merge(a: MergeArgs) -> Result<i32> {
    if let Some(say) =
        kbench::commands::slurm::merge_measure(&a.inputs, a.out.as_deref(), a.partial)?
    {
        println!("{say}");
        return Ok(exit::OK);
    }
    let r = kbench::commands::merge::merge(&a.inputs, a.out.as_deref(), a.partial)?;
    println!(
        "merged {} run dir(s) into {}: {} record(s), {} new",
        r.inputs.len(),
        r.out.display(),
        r.records,
        r.added
    );
    if !r.unfinished.is_empty() {
        eprintln!(
            "kbench: left out unfinished shard(s) {:?} (--partial): merge again once they finish",
            r.unfinished
        );
    }
    Ok(exit::OK)
}

fn basis(b: BasisArg) -> kbench_reports::SpeedupBasis {
    match b {
        BasisArg::Median => kbench_reports::SpeedupBasis::Median,
        BasisArg::Mean => kbench_reports::SpeedupBasis::Mean,
    }
}

fn report(a: ReportArgs) -> Result<i32> {
    use kbench_reports::task::Pick;
    use kbench_reports::{export, papers, plot};
    let mut runs = kbench::commands::report::read_runs(&a.runs)?;
    ignore_flags(&mut runs, &a.ignore_flags)?;
    let default = if a.table.is_some() {
        BasisArg::Mean
    } else {
        BasisArg::Median
    };
    let pick = match a.pick {
        Some(PickArg::First) => Pick::FirstSample,
        Some(PickArg::Best) => Pick::BestCorrect,
        None if a.table == Some(TableArg::Kernelbench) => Pick::FirstSample,
        None => Pick::BestCorrect,
    };
    let report =
        kbench_reports::build_report_picking(&runs, basis(a.basis.unwrap_or(default)), pick);
    match a.table {
        Some(t) => {
            let table = match t {
                TableArg::Cudaforge => papers::PaperTable::CudaForge,
                TableArg::CudaAgent => papers::PaperTable::CudaAgent,
                TableArg::Kevin => papers::PaperTable::Kevin,
                TableArg::Kernelbench => papers::PaperTable::KernelBench,
            };
            print!("{}", papers::render_paper_table(&report, table, false));
        }
        None => print!("{}", export::render_terminal(&report)),
    }
    let exports = [
        (a.export_csv, export::render_csv as fn(&_) -> String),
        (a.export_json, export::render_json),
        (a.export_markdown, export::render_markdown),
    ];
    for (path, render) in exports {
        if let Some(path) = path {
            kbench::commands::report::write_file(&path, &render(&report))?;
        }
    }
    if let Some(dir) = a.plots {
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        for p in plot::plots(&report) {
            let svg = plot::render_svg(&p)?;
            kbench::commands::report::write_file(&dir.join(format!("{}.svg", p.name)), &svg)?;
            plot::write_png(&p, &dir.join(format!("{}.png", p.name)))?;
        }
    }
    Ok(exit::OK)
}

fn leaderboard(a: LeaderboardArgs) -> Result<i32> {
    let mut runs = kbench::commands::report::read_runs(&a.runs)?;
    ignore_flags(&mut runs, &a.ignore_flags)?;
    let report = kbench_reports::build_report(&runs, basis(a.basis));
    let page = kbench_reports::leaderboard::render_leaderboard(&report, &a.title)?;
    kbench::commands::report::write_file(&a.out, &page)?;
    println!("leaderboard: {}", a.out.display());
    Ok(exit::OK)
}

/// `--ignore-flag`, said on stderr so a table is never silently more generous.
fn ignore_flags(runs: &mut [kbench_reports::RunInput], flags: &[String]) -> Result<()> {
    if flags.is_empty() {
        return Ok(());
    }
    let n = kbench::commands::report::ignore_flags(runs, flags)?;
    eprintln!(
        "kbench: --ignore-flag {}: {n} flagged kernel(s) counted as their cases and timing say",
        flags.join(",")
    );
    Ok(())
}

fn setup(a: SetupArgs) -> Result<i32> {
    let cache = python::cache_dir();
    let choice = PythonChoice::resolve(a.python.python.as_deref(), &cache);
    let info = python::setup(&choice, a.quiet)?;
    println!(
        "python {} ({}), torch {}{}, ninja {}",
        info.python,
        info.executable,
        info.torch,
        if info.cuda_available {
            format!(
                ", CUDA {} with {} GPU(s)",
                info.torch_cuda.as_deref().unwrap_or("?"),
                info.device_count
            )
        } else {
            ", CPU only".to_string()
        },
        info.ninja
            .as_deref()
            .unwrap_or("not found (C++/CUDA candidates cannot build)")
    );
    Ok(exit::OK)
}

fn list(a: ListArgs) -> Result<i32> {
    let problems = config::load_suite(&a.suite)?;
    for p in problems {
        println!("{}\t{}\t{}", p.level, p.id, p.name);
    }
    Ok(exit::OK)
}

fn gpus(a: GpusArgs) -> Result<i32> {
    match kbench::gpu::listing() {
        Ok(listing) if a.json => println!("{}", serde_json::to_string_pretty(&listing)?),
        Ok(listing) => print!("{}", kbench::gpu::render_listing(&listing)),
        Err(why) if a.json => println!(
            "{}",
            serde_json::json!({
                "gpus": [],
                "why": why.why_none(),
                "driver_version": kbench::gpu::nvml::driver_version(),
                "cuda_driver_version": kbench::gpu::cuda_driver_version(),
                "nvml_unavailable": kbench::gpu::nvml::unavailable_reason(),
            })
        ),
        Err(why) => println!("no GPU: {}", why.why_none()),
    }
    Ok(exit::OK)
}

fn install_stop_flag() -> Arc<AtomicBool> {
    static STOP: std::sync::OnceLock<Arc<AtomicBool>> = std::sync::OnceLock::new();
    Arc::clone(STOP.get_or_init(|| {
        let stop = Arc::new(AtomicBool::new(false));
        let s = Arc::clone(&stop);
        // Failing to install a handler only loses graceful stops.
        let _ = ctrlc::set_handler(move || s.store(true, Ordering::SeqCst));
        stop
    }))
}

fn run(a: RunArgs) -> Result<i32> {
    let request = match &a.baselines {
        Some(spec) => Some(kbench_baselines::BaselineRequest::parse(spec)?),
        None if !a.baseline_file.is_empty() => Some(kbench_baselines::BaselineRequest::default()),
        None => None,
    };
    let request = request.map(|mut r| -> Result<_> {
        for f in &a.baseline_file {
            let (mode, path) = f.split_once('=').with_context(|| {
                format!("--baseline-file {f:?}: expected MODE=FILE, e.g. compile=baselines/data/x/torch-2.11.0/compile.json")
            })?;
            let mode = kbench_baselines::Mode::parse(mode)
                .map_err(|e| anyhow::anyhow!("--baseline-file {f:?}: {e}"))?;
            r.files.push((mode, std::path::PathBuf::from(path)));
        }
        r.force = a.force_baselines;
        r.store = a.baseline_store.clone();
        Ok(r)
    });
    let request = request.transpose()?;
    let agent_opts = match a.agent {
        kbench::cli::AgentKind::Reference | kbench::cli::AgentKind::Replay => None,
        k => Some(config::agent_options(k, &a.agent_args)?),
    };
    let mut config = RunConfig::try_from(a)?;
    if let Some(opts) = agent_opts {
        if request.is_some() {
            anyhow::bail!("--baselines is not yet supported with the LLM agents");
        }
        return kbench::llm::run(&config, &opts, install_stop_flag());
    }
    if let Some(req) = &request {
        if config.timing.is_none() {
            anyhow::bail!("--baselines compares times: drop --no-timing");
        }
        config.baselines =
            baselines::prepare_for_run(&config, req, install_stop_flag())?.map(std::sync::Arc::new);
    }
    run_config(&config)
}

fn run_config(config: &RunConfig) -> Result<i32> {
    let stop = install_stop_flag();
    let result = engine::run(config, stop)?;
    let summary = kbench_reports::summarize(&result.records);
    println!("{}", kbench_reports::render_summary(&summary));
    if let Some(table) = &config.baselines {
        for line in table.describe(&config.problems) {
            println!("{line}");
        }
        for line in baselines::summary_lines(&result.records, table) {
            println!("{line}");
        }
        let used = result.run_dir.join("baselines_used.json");
        kbench::runlog::write_atomic(
            &used,
            serde_json::to_string_pretty(&table.manifest(&config.problems))?.as_bytes(),
        )?;
    }
    println!(
        "run log: {}",
        result.run_dir.join(kbench::runlog::RECORDS).display()
    );
    if result.interrupted {
        eprintln!(
            "kbench: interrupted; what was recorded is kept: rerun with --resume to continue"
        );
        return Ok(exit::INTERRUPTED);
    }
    Ok(if result.records.iter().all(|r| r.outcome.is_ok()) {
        exit::OK
    } else {
        exit::KERNELS_FAILED
    })
}

fn demo(a: DemoArgs) -> Result<i32> {
    let cache = python::cache_dir();
    let choice = PythonChoice::resolve(a.python.python.as_deref(), &cache);
    eprintln!(
        "kbench demo: checking the Python environment (first time: installs torch, a few minutes)"
    );
    let info = python::setup(&choice, false)?;
    let device = config::resolve_device(&a.device)?;
    eprintln!(
        "kbench demo: torch {} on {}; evaluating the reference agent on the smoke suite",
        info.torch, device
    );
    let out = a
        .out
        .unwrap_or_else(|| std::path::PathBuf::from("kbench-demo"));
    if out.join(kbench::runlog::MANIFEST).exists() {
        std::fs::remove_dir_all(&out)
            .with_context(|| format!("clearing the previous demo run {}", out.display()))?;
    }
    let args = RunArgs::parse_demo(&out, &device.to_string(), a.python.python.as_deref());
    let config = RunConfig::try_from(args)?;
    run_config(&config)
}

fn baselines_cmd(a: BaselinesArgs) -> Result<i32> {
    match a.command {
        BaselinesCommand::Measure(m) => {
            let stop = install_stop_flag();
            let r = baselines::measure_command(&m, stop)?;
            Ok(r)
        }
        BaselinesCommand::Import(i) => baselines::import_command(&i),
        BaselinesCommand::Show(s) => baselines::show_command(&s),
    }
}
