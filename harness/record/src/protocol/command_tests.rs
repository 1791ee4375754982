use std::collections::{BTreeMap, BTreeSet};

use serde_json::{json, Value};

use super::*;

/// The worker's command table, from the embedded source itself.
const WORKER_PROTOCOL: &str = include_str!("../../../python/kbench_worker/protocol.py");

fn spec() -> TensorSpec {
    TensorSpec {
        handle: Some("ab".into()),
        offset: Some(0),
        dtype: "f32".into(),
        shape: vec![2],
        nbytes: 8,
        name: Some("in:0".into()),
    }
}

/// Every command twice: with every field set, and with every optional field left out.
fn samples() -> Vec<(Command, Command)> {
    let load = Load {
        problem_path: "p.py".into(),
        candidate_path: Some("c.py".into()),
        device: "cpu".into(),
        precision: "fp32".into(),
        model_mode: "train".into(),
        weight_seed: 42,
        want_f64: Some(true),
        cpu_threads: Some(1),
        build_dir: Some("b".into()),
        warm_up: Some(false),
        gate_device_work: true,
    };
    let bare_load = Load {
        candidate_path: None,
        want_f64: None,
        cpu_threads: None,
        build_dir: None,
        warm_up: None,
        gate_device_work: false,
        ..load.clone()
    };
    let make = MakeCase {
        seed: 1,
        forward_seed: 2,
        device_io: false,
        family: Some("nan-inf".into()),
        stability_rtol: Some(0.1),
        probe_rtol: Some(0.1),
        probe_atol: Some(0.1),
    };
    let run = RunCase {
        forward_seed: 2,
        inputs: json!([]),
        poison: vec![],
        device_inputs: Some(BTreeMap::from([("in:0".to_string(), spec())])),
        device_outputs: Some(vec![spec()]),
        release_case: Some(true),
        return_inputs: Some(true),
    };
    let export = Export {
        targets: vec![spec()],
        partial: true,
        drop_case: true,
    };
    let audit = Audit {
        seed: 1,
        forward_seed: 2,
        families: vec!["random".into()],
        rtol: 0.1,
        max_weights: 64,
        max_rows: Some(8),
    };
    let open = TimeOpen {
        args: json!([]),
        forward_seed: 2,
        staged: vec![],
        outputs: vec![],
        source: Some(vec![]),
        exchange: Some(ExchangeFile { path: "x".into() }),
        cpu: Some(3),
        staged_sets: Some(vec![vec![]]),
        hold_outputs: Some(2),
    };
    let build = Build {
        problem_path: "p.py".into(),
        candidate_path: "c.py".into(),
        build_dir: "b".into(),
        weight_seed: 0,
        forward_s: 60,
    };
    let time_as = TimeAs {
        method: "cuda-l1".into(),
        timed_calls: 100,
        seed: 3,
        budget_s: 20.0,
    };
    let same = |c: Command| (c.clone(), c);
    vec![
        (Command::Load(load), Command::Load(bare_load)),
        same(Command::Build(build)),
        (
            Command::MakeCase(make.clone()),
            Command::MakeCase(MakeCase {
                family: None,
                stability_rtol: None,
                probe_rtol: None,
                probe_atol: None,
                ..make
            }),
        ),
        (
            Command::RunCase(run.clone()),
            Command::RunCase(RunCase {
                device_inputs: None,
                device_outputs: None,
                release_case: None,
                return_inputs: None,
                ..run
            }),
        ),
        (
            Command::EvalCase(EvalCase {
                forward_seed: 2,
                seed: Some(1),
                inputs: Some(json!([])),
            }),
            Command::EvalCase(EvalCase {
                forward_seed: 2,
                seed: None,
                inputs: None,
            }),
        ),
        (
            Command::Export(export.clone()),
            Command::Export(Export {
                drop_case: false,
                ..export
            }),
        ),
        (
            Command::Audit(audit.clone()),
            Command::Audit(Audit {
                max_rows: None,
                ..audit
            }),
        ),
        same(Command::Cost(Seeds {
            seed: 1,
            forward_seed: 2,
        })),
        same(Command::Profile { forward_seed: 2 }),
        same(Command::TimeAs(time_as)),
        (
            Command::TimeOpen(open.clone()),
            Command::TimeOpen(TimeOpen {
                source: None,
                exchange: None,
                cpu: None,
                staged_sets: None,
                hold_outputs: None,
                ..open
            }),
        ),
        same(Command::StageInputs { seeds: vec![1] }),
        (
            Command::TimedCall {
                round_warmup: Some(1),
                staged_set: Some(2),
            },
            Command::TimedCall {
                round_warmup: None,
                staged_set: None,
            },
        ),
        same(Command::Release),
        (
            Command::TimeClose {
                release: Some(false),
            },
            Command::TimeClose { release: None },
        ),
        same(Command::Proceed { id: 1 }),
        same(Command::Exit),
    ]
}

/// Fails to compile when a command is added without a sample above: one index per variant.
fn variant(c: &Command) -> usize {
    match c {
        Command::Load(_) => 0,
        Command::Build(_) => 1,
        Command::MakeCase(_) => 2,
        Command::RunCase(_) => 3,
        Command::EvalCase(_) => 4,
        Command::Export(_) => 5,
        Command::Audit(_) => 6,
        Command::Cost(_) => 7,
        Command::Profile { .. } => 8,
        Command::TimeAs(_) => 9,
        Command::TimeOpen(_) => 10,
        Command::StageInputs { .. } => 11,
        Command::TimedCall { .. } => 12,
        Command::Release => 13,
        Command::TimeClose { .. } => 14,
        Command::Proceed { .. } => 15,
        Command::Exit => 16,
    }
}
const VARIANTS: usize = 17;

/// A header's fields, less the envelope (`cmd`, and `id`, which `proceed` names itself).
fn fields(c: &Command) -> BTreeSet<String> {
    let h = c.to_header();
    assert_eq!(h["cmd"], c.name(), "{h}");
    h.as_object()
        .unwrap()
        .keys()
        .filter(|k| *k != "cmd" && *k != "id")
        .cloned()
        .collect()
}

/// `COMMANDS = {...}` of the worker's protocol.py: a dict literal written as JSON.
fn worker_table() -> BTreeMap<String, BTreeMap<String, Vec<String>>> {
    let start = WORKER_PROTOCOL
        .find("\nCOMMANDS = {")
        .expect("protocol.py defines COMMANDS")
        + "\nCOMMANDS = ".len();
    let len = WORKER_PROTOCOL[start..]
        .find("\n}\n")
        .expect("COMMANDS ends with a closing brace alone on its line")
        + 2;
    serde_json::from_str(&WORKER_PROTOCOL[start..start + len])
        .expect("COMMANDS is written as JSON (double quotes, no trailing commas)")
}

#[test]
fn the_worker_checks_the_same_commands_and_fields_as_the_enum() {
    let samples = samples();
    let covered: BTreeSet<usize> = samples.iter().map(|(c, _)| variant(c)).collect();
    assert_eq!(covered.len(), VARIANTS, "a command has no sample");
    let table = worker_table();
    let names: BTreeSet<&str> = samples.iter().map(|(c, _)| c.name()).collect();
    let worker_names: BTreeSet<&str> = table.keys().map(String::as_str).collect();
    assert_eq!(
        names, worker_names,
        "commands of the enum and of the worker"
    );
    for (full, bare) in &samples {
        let entry = &table[full.name()];
        let required: BTreeSet<String> = entry["required"].iter().cloned().collect();
        let optional: BTreeSet<String> = entry["optional"].iter().cloned().collect();
        assert!(required.is_disjoint(&optional), "{}", full.name());
        let allowed: BTreeSet<String> = required.union(&optional).cloned().collect();
        assert_eq!(fields(full), allowed, "fields of {}", full.name());
        let always = fields(bare);
        assert!(
            required.is_subset(&always),
            "{}: the worker requires {:?}, the harness always sends {:?}",
            full.name(),
            required,
            always
        );
    }
}

#[test]
fn headers_are_what_the_worker_reads() {
    // Optional fields left out are absent, not null; a GPU load's thread count is null.
    let (_, bare) = &samples()[0];
    assert_eq!(
        bare.to_header(),
        json!({"cmd": "load", "problem_path": "p.py", "device": "cpu", "precision": "fp32",
               "model_mode": "train", "weight_seed": 42, "cpu_threads": null})
    );
    assert_eq!(Command::Exit.to_header(), json!({"cmd": "exit"}));
    assert_eq!(
        Command::TimedCall {
            round_warmup: None,
            staged_set: None
        }
        .to_header(),
        json!({"cmd": "timed_call"})
    );
    let host = TensorSpec {
        handle: None,
        offset: Some(64),
        dtype: "f32".into(),
        shape: vec![2, 3],
        nbytes: 24,
        name: None,
    };
    assert_eq!(
        serde_json::to_value(host).unwrap(),
        json!({"offset": 64, "dtype": "f32", "shape": [2, 3], "nbytes": 24})
    );
    let v: Value = Command::TimeAs(TimeAs {
        method: "kernelbench".into(),
        timed_calls: 100,
        seed: 1,
        budget_s: 20.0,
    })
    .to_header();
    assert_eq!(v["timed_calls"], 100);
}
