//! `kbench`: a thin dispatcher. The work happens in the library (`kbench::commands`, one
//! module per subcommand); exit codes are in `exit`.

use anyhow::Result;
use clap::Parser;
use kbench::cli::{BaselinesCommand, Cli, Command};
use kbench::commands::stop::install_stop_flag;
use kbench::commands::{self, baselines};
use kbench::exit;

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
        Command::Setup(a) => commands::setup::command(a),
        Command::List(a) => commands::list::command(a),
        Command::Gpus(a) => commands::gpus::command(a),
        Command::Run(a) => commands::run::command(*a),
        Command::Demo(a) => commands::demo::command(a),
        Command::Report(a) => commands::report::command(a),
        Command::Leaderboard(a) => commands::report::leaderboard(a),
        Command::Slurm(a) => commands::slurm::command(&a),
        Command::Merge(a) => commands::merge::command(&a),
        Command::Import(a) => commands::import::command(&a),
        Command::Baselines(a) => match a.command {
            BaselinesCommand::Measure(m) => baselines::measure_command(&m, install_stop_flag()),
            BaselinesCommand::Import(i) => baselines::import_command(&i),
            BaselinesCommand::Show(s) => baselines::show_command(&s),
        },
        Command::Check(a) => commands::check::command(&a, install_stop_flag()),
        Command::Audit(a) => commands::audit::command(&a, install_stop_flag()),
        Command::FakeLlm(a) => kbench::llm::fake_server::command(
            &a.script,
            a.port,
            a.url_file.as_deref(),
            a.log.as_deref(),
        ),
        Command::Profile(a) => commands::profile::command(&a),
        Command::Serve(a) => commands::serve::command(*a),
    }
}
