//! A reference whose `load`, sent ahead while another problem runs on the device, runs out
//! of GPU memory is loaded once more by a fresh worker when its problem's turn comes, with a
//! note; a second failure is the problem's own `reference_error`. Real `kbench` processes and
//! real Python workers on the CPU: the problems raise torch's own out-of-memory error.

use crate::common;

use std::path::Path;

use common::{ensure_python, kbench, records, shared, show, RunBuilder};

/// A problem whose `Model()` appends a line to `tally` and raises torch's out-of-memory
/// error while `tally` has fewer than `fails` lines. Only where `tally` exists (the test makes
/// it): a sandboxed candidate's worker, which does not see it, constructs the model.
fn problem(tally: &Path, fails: usize) -> String {
    format!(
        "import os\nimport torch\nimport torch.nn as nn\n\n\
         TALLY = {tally:?}\n\n\
         class Model(nn.Module):\n    def __init__(self):\n        super().__init__()\n\
         \x20       if not os.path.exists(TALLY):\n            return\n\
         \x20       with open(TALLY, 'r+') as f:\n            n = len(f.readlines())\n            f.write('load\\n')\n\
         \x20       if n < {fails}:\n            raise torch.OutOfMemoryError('CUDA out of memory. Tried to allocate 12.00 GiB')\n\n\
         \x20   def forward(self, x):\n        return torch.relu(x)\n\n\
         def get_inputs():\n    return [torch.randn(8, 64)]\n\ndef get_init_inputs():\n    return []\n",
        tally = tally.display().to_string()
    )
}

#[test]
fn a_reference_load_sent_ahead_that_ran_out_of_memory_is_loaded_again_once() {
    let _guard = shared();
    ensure_python();
    let dir = tempfile::tempdir().unwrap();
    let level = dir.path().join("kb/level1");
    std::fs::create_dir_all(&level).unwrap();
    let (once, always) = (dir.path().join("once.txt"), dir.path().join("always.txt"));
    std::fs::write(&once, "").unwrap();
    std::fs::write(&always, "").unwrap();
    std::fs::write(level.join("1_OomOnce.py"), problem(&once, 1)).unwrap();
    std::fs::write(level.join("2_OomAlways.py"), problem(&always, 1000)).unwrap();
    let out = dir.path().join("run");
    let o = kbench()
        .args(RunBuilder::new().kernelbench(dir.path().join("kb")).build())
        .args(["--levels", "1", "--device", "cpu", "--families", "random"])
        .args(["--timed-calls", "5", "--rounds", "1", "--quiet", "--out"])
        .arg(&out)
        .output()
        .unwrap();
    let mut got: Vec<(u64, String, String, String)> = records(&out)
        .iter()
        .map(|r| {
            (
                r["problem"]["id"].as_u64().unwrap(),
                r["outcome"]["kind"].as_str().unwrap().to_string(),
                r["outcome"]["message"].as_str().unwrap_or("").to_string(),
                r["notes"].to_string(),
            )
        })
        .collect();
    got.sort();
    assert_eq!(got.len(), 2, "{}", show(&o));
    // Out of memory at the load sent ahead, loaded again, evaluated.
    assert_eq!(got[0].1, "ok", "{got:?}\n{}", show(&o));
    assert!(
        got[0].3.contains("load sent ahead ran out of GPU memory")
            && got[0].3.contains("loaded again by a fresh worker")
            && got[0].3.contains("Tried to allocate 12.00 GiB"),
        "{}",
        got[0].3
    );
    // Out of memory every time: one more load, then the problem's own reference error.
    assert_eq!(got[1].1, "reference_error", "{got:?}");
    assert!(got[1].2.contains("out of memory"), "{}", got[1].2);
    let loads = |p: &Path| std::fs::read_to_string(p).unwrap().lines().count();
    assert_eq!(loads(&always), 2, "one load ahead and one again, no more");
    assert!(loads(&once) >= 2, "the first load failed, a second one ran");
}
