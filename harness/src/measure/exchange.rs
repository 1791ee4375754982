//! Where timed calls get their inputs and put their outputs. The reference draws calls'
//! fresh values into source sets of buffers shaped like the timed case's tensor inputs, one
//! set per call, several calls ahead ([`super::phase_memory::stage_ahead`]); each side has
//! its own staged inputs, into which the harness copies the source inside that side's timed
//! window (so a candidate sees a call's values only once its window has begun, and nothing it
//! computes ahead can lie outside a window), and its own output slots, NaN-poisoned before
//! each call. Each worker maps its buffers for the whole timing phase.
//!
//! On a GPU they are harness-owned device buffers shared through CUDA IPC, and the harness
//! flushes the L2 with a buffer of its own; each side has up to four staged sets, which its
//! calls use in turn (the same set on both sides for a call), so that a side's calls do not
//! all read their inputs from one placement ([`super::phase_memory::placements`]). On the
//! CPU each side has one file (the candidate's in its private working folder, which kbench
//! puts on tmpfs where it can): the worker maps it, the harness reads and writes it only
//! through the descriptor it created it with (never the path again: a candidate may put
//! something else at that name; never a mapping: a candidate that truncates the file then
//! costs a short read, not a SIGBUS in the harness).

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{anyhow, bail, Context, Result};
use kbench_adversarial::Comparison;
use kbench_record::protocol::{Command, ExchangeFile, TensorSpec, TimeOpen};
use kbench_record::{Dtype, HostTensor, Precision, ToleranceProfile};
use serde_json::{json, Value};

use super::phase_memory::placements;
use super::reference::{CaseData, DevTensorOwned, RefCase};
use super::Station;
use crate::gpu::compare::DevTensor;
use crate::gpu::devmem::{DevBuf, Gpu};

/// A tensor's dtype and shape.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct TensorLayout {
    pub(crate) dtype: Dtype,
    pub(crate) shape: Vec<u64>,
}

impl TensorLayout {
    pub(crate) fn nbytes(&self) -> u64 {
        self.shape.iter().product::<u64>() * self.dtype.size() as u64
    }
}

/// One argument of the timed call.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum ArgLayout {
    /// The staged tensor of this index.
    Staged(usize),
    /// A plain value, the same in every call.
    Value(Value),
}

/// What a timed call takes and returns: the timed case's arguments and outputs.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct CaseLayout {
    pub(crate) args: Vec<ArgLayout>,
    pub(crate) inputs: Vec<TensorLayout>,
    pub(crate) outputs: Vec<TensorLayout>,
}

impl CaseLayout {
    /// The layout of case `rc` (host or device).
    pub(crate) fn of(rc: &RefCase) -> Result<CaseLayout> {
        let (args, tensors): (Value, Vec<(String, TensorLayout)>) = match &rc.data {
            CaseData::Host { run_frame, .. } => (
                run_frame.header.get("inputs").cloned().unwrap_or(json!([])),
                run_frame
                    .tensors()
                    .context("reading the timed case's inputs")?
                    .into_iter()
                    .map(|(n, t)| {
                        (
                            n,
                            TensorLayout {
                                dtype: t.dtype(),
                                shape: t.shape().to_vec(),
                            },
                        )
                    })
                    .collect(),
            ),
            CaseData::Device { args, inputs, .. } => (
                args.clone(),
                inputs
                    .iter()
                    .map(|(n, t)| {
                        (
                            n.clone(),
                            TensorLayout {
                                dtype: t.dtype,
                                shape: t.shape.clone(),
                            },
                        )
                    })
                    .collect(),
            ),
        };
        let outputs = match &rc.data {
            CaseData::Host { outputs, .. } => outputs
                .iter()
                .map(|o| TensorLayout {
                    dtype: o.dtype(),
                    shape: o.shape().to_vec(),
                })
                .collect(),
            CaseData::Device { outputs, .. } => outputs
                .iter()
                .map(|o| TensorLayout {
                    dtype: o.dtype,
                    shape: o.shape.clone(),
                })
                .collect(),
        };
        let mut layout = CaseLayout {
            args: Vec::new(),
            inputs: Vec::new(),
            outputs,
        };
        for (i, a) in args.as_array().into_iter().flatten().enumerate() {
            if let Some(name) = a.get("tensor").and_then(Value::as_str) {
                let t = tensors
                    .iter()
                    .find(|(n, _)| n == name)
                    .ok_or_else(|| anyhow!("argument {i} names tensor {name}, not in the case"))?;
                layout.args.push(ArgLayout::Staged(layout.inputs.len()));
                layout.inputs.push(t.1.clone());
            } else if let Some(v) = a.get("value") {
                layout.args.push(ArgLayout::Value(v.clone()));
            } else {
                bail!("argument {i} of the timed case is neither a tensor nor a value: {a}");
            }
        }
        Ok(layout)
    }

    fn args_json(&self) -> Value {
        Value::Array(
            self.args
                .iter()
                .map(|a| match a {
                    ArgLayout::Staged(j) => json!({"staged": j}),
                    ArgLayout::Value(v) => json!({"value": v}),
                })
                .collect(),
        )
    }

    /// Bytes of the tensor inputs and of the outputs.
    pub(crate) fn bytes(&self) -> (u64, u64) {
        let sum = |v: &[TensorLayout]| v.iter().map(TensorLayout::nbytes).sum();
        (sum(&self.inputs), sum(&self.outputs))
    }

    /// Bytes of the inputs and outputs: what one side's buffers hold.
    pub(crate) fn io_bytes(&self) -> u64 {
        self.inputs
            .iter()
            .chain(&self.outputs)
            .map(TensorLayout::nbytes)
            .sum()
    }
}

/// The two sides of a timing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Side {
    Reference,
    Candidate,
}

/// The buffers of both sides.
pub(crate) enum Exchange {
    Device(DeviceExchange),
    Host(HostExchange),
}

pub(crate) struct DeviceExchange {
    gpu: Arc<Gpu>,
    /// What the reference draws calls' inputs into: one set per call drawn ahead.
    source: Vec<Vec<DevTensorOwned>>,
    /// Staged inputs, reference then candidate: per side the sets calls use in turn
    /// ([`placements`]).
    inputs: [Vec<Vec<DevTensorOwned>>; 2],
    /// How many of the latest calls' outputs each worker keeps alive ([`placements`]).
    hold_outputs: u32,
    /// Output slots, reference then candidate.
    outputs: [Vec<DevTensorOwned>; 2],
    /// Written before every timed call: at least twice the L2 (KernelBench's timing thrashes
    /// the L2 before each trial).
    flush: DevBuf,
}

/// One side's file: where each staged input and each output lies in it (and, in the
/// reference's, the source sets).
struct HostFile {
    file: File,
    path: PathBuf,
    source: Vec<Vec<(u64, TensorLayout)>>,
    inputs: Vec<(u64, TensorLayout)>,
    outputs: Vec<(u64, TensorLayout)>,
}

pub(crate) struct HostExchange {
    files: [HostFile; 2],
    /// The reference's file's folder (the candidate's lies in its working folder).
    _reference_dir: tempfile::TempDir,
    /// The candidate's file, removed with the exchange.
    _candidate_file: tempfile::TempPath,
}

const ALIGN: u64 = 64;

/// Bytes written at a time when poisoning host slots.
const POISON_CHUNK: usize = 1 << 20;

fn index(side: Side) -> usize {
    match side {
        Side::Reference => 0,
        Side::Candidate => 1,
    }
}

impl Exchange {
    /// The buffers for `layout` on `station`'s device, with `sets` source sets. On the CPU
    /// the candidate's file goes into `candidate_dir`, its worker's private working folder.
    pub(crate) fn new(
        station: &Station,
        layout: &CaseLayout,
        candidate_dir: &Path,
        sets: usize,
        release_calls: bool,
    ) -> Result<Exchange> {
        let sets = sets.max(1);
        match &station.gpu {
            Some(gpu) => {
                let (input_bytes, output_bytes) = layout.bytes();
                let (staged, hold) = placements(input_bytes, output_bytes, release_calls);
                Ok(Exchange::Device(DeviceExchange::new(
                    gpu, layout, sets, staged, hold,
                )?))
            }
            None => Ok(Exchange::Host(HostExchange::new(
                layout,
                candidate_dir,
                sets,
            )?)),
        }
    }

    /// Which of a side's staged sets call `call` uses (the same on both sides).
    pub(crate) fn staged_set(&self, call: u32) -> u32 {
        match self {
            Exchange::Device(d) => call % d.inputs[0].len().max(1) as u32,
            Exchange::Host(_) => 0,
        }
    }

    /// How many source sets there are: calls the reference draws at a time.
    pub(crate) fn sets(&self) -> usize {
        match self {
            Exchange::Device(d) => d.source.len(),
            Exchange::Host(h) => h.files[0].source.len(),
        }
    }

    /// The `time_open` command of `side` (the reference's also names the source buffers).
    /// `cpu`: the core the worker's main thread runs on for the phase (CUDA).
    pub(crate) fn open_command(
        &self,
        side: Side,
        layout: &CaseLayout,
        forward_seed: u64,
        cpu: Option<usize>,
    ) -> Command {
        let i = index(side);
        let reference = side == Side::Reference;
        let (mut staged_sets, mut hold_outputs) = (None, None);
        let (staged, outputs, source, exchange) = match self {
            Exchange::Device(d) => {
                let specs = |ts: &[DevTensorOwned]| ts.iter().map(DevTensorOwned::spec).collect();
                let mut sets = d.inputs[i].iter().map(|s| specs(s));
                let first = sets.next().unwrap_or_default();
                let further: Vec<Vec<TensorSpec>> = sets.collect();
                staged_sets = (!further.is_empty()).then_some(further);
                hold_outputs = (d.hold_outputs > 0).then_some(d.hold_outputs);
                (
                    first,
                    specs(&d.outputs[i]),
                    reference.then(|| d.source.iter().map(|s| specs(s)).collect()),
                    None,
                )
            }
            Exchange::Host(h) => {
                let f = &h.files[i];
                let spec = |(off, t): &(u64, TensorLayout)| TensorSpec {
                    handle: None,
                    offset: Some(*off),
                    dtype: t.dtype.as_str().into(),
                    shape: t.shape.clone(),
                    nbytes: t.nbytes(),
                    name: None,
                };
                let all = |v: &[(u64, TensorLayout)]| v.iter().map(spec).collect();
                (
                    all(&f.inputs),
                    all(&f.outputs),
                    reference.then(|| f.source.iter().map(|s| all(s)).collect()),
                    Some(ExchangeFile {
                        path: f.path.clone(),
                    }),
                )
            }
        };
        Command::TimeOpen(TimeOpen {
            args: layout.args_json(),
            forward_seed,
            staged,
            outputs,
            source,
            exchange,
            cpu,
            staged_sets,
            hold_outputs,
        })
    }

    /// Copies source set `set` (a call's inputs, as the reference drew them) into `side`'s
    /// staged inputs (on a GPU its first staged set), waiting for the copy.
    pub(crate) fn stage_into(&self, side: Side, set: usize) -> Result<()> {
        let i = index(side);
        match self {
            Exchange::Device(d) => {
                for (dst, src) in d.staged(i, 0)?.iter().zip(d.set(set)?) {
                    d.gpu.copy_queued(&dst.buf, &src.buf, src.nbytes())?;
                }
                d.gpu.wait()
            }
            Exchange::Host(h) => {
                let r = &h.files[0];
                let dst = &h.files[i];
                let source = r
                    .source
                    .get(set)
                    .ok_or_else(|| anyhow!("no source set {set}"))?;
                for ((off, t), (doff, _)) in source.iter().zip(&dst.inputs) {
                    let bytes =
                        read_at(&r.file, *off, t.nbytes()).context("reading the source inputs")?;
                    dst.file
                        .write_all_at(&bytes, *doff)
                        .context("writing the staged inputs")?;
                }
                Ok(())
            }
        }
    }

    /// Fills every output slot of both sides with NaN bits (0xff bytes): an element a call
    /// does not write cannot pass.
    pub(crate) fn poison_outputs(&self) -> Result<()> {
        match self {
            Exchange::Device(d) => {
                for s in d.outputs.iter().flatten() {
                    d.gpu.fill(&s.buf, 0xff)?;
                }
                Ok(())
            }
            Exchange::Host(h) => {
                let ones = vec![0xffu8; POISON_CHUNK];
                for f in &h.files {
                    for (off, t) in &f.outputs {
                        let mut done = 0;
                        while done < t.nbytes() {
                            let n = (t.nbytes() - done).min(POISON_CHUNK as u64) as usize;
                            f.file
                                .write_all_at(&ones[..n], off + done)
                                .context("poisoning an output slot")?;
                            done += n as u64;
                        }
                    }
                }
                Ok(())
            }
        }
    }

    /// Copies source set `set` into the staged set of `side` that call `call` uses
    /// ([`Exchange::staged_set`]), then writes the L2 flush buffer (`call` varies the byte
    /// so no write is skipped) from the harness's own context, and waits for both (one
    /// wait: a timed window holds this). On the CPU the copy alone.
    pub(crate) fn stage_and_flush(
        &self,
        side: Side,
        set: usize,
        call: u32,
        flush: bool,
    ) -> Result<()> {
        let staged = self.staged_set(call) as usize;
        match self {
            Exchange::Device(d) => {
                for (dst, src) in d.staged(index(side), staged)?.iter().zip(d.set(set)?) {
                    d.gpu.copy_queued(&dst.buf, &src.buf, src.nbytes())?;
                }
                if flush {
                    d.gpu.fill_queued(&d.flush, (call & 0x7f) as u8)?;
                }
                d.gpu.wait()
            }
            Exchange::Host(_) => self.stage_into(side, set),
        }
    }

    /// Compares the candidate's output `k` with the reference's under `profile` (no float64
    /// reference: a timed call's reference is the working-precision forward on the same
    /// inputs).
    pub(crate) fn compare_output(
        &self,
        station: &Station,
        k: usize,
        profile: ToleranceProfile,
        precision: Precision,
    ) -> Result<std::result::Result<Comparison, kbench_adversarial::CompareError>> {
        match self {
            Exchange::Device(d) => {
                let cmp = station
                    .cmp
                    .as_ref()
                    .ok_or_else(|| anyhow!("no comparator on this GPU"))?;
                cmp.compare(
                    &d.outputs[1][k].view(),
                    &d.outputs[0][k].view(),
                    None,
                    profile,
                    precision,
                )
            }
            Exchange::Host(h) => {
                let r = h.files[0].output(k)?;
                let c = h.files[1].output(k)?;
                Ok(kbench_adversarial::compare(
                    &c, &r, None, profile, precision,
                ))
            }
        }
    }

    /// The candidate's output `k` as it lies in its slot (to name unwritten elements).
    pub(crate) fn candidate_output(&self, k: usize) -> Result<HostTensor> {
        match self {
            Exchange::Device(d) => {
                let s = &d.outputs[1][k];
                let bytes = d.gpu.read(&s.buf, 0, s.nbytes())?;
                Ok(HostTensor::new(s.dtype, s.shape.clone(), bytes)?)
            }
            Exchange::Host(h) => h.files[1].output(k),
        }
    }

    /// Staged inputs whose bytes differ between the sides after their call `call`: inputs
    /// the candidate wrote to (when the reference's forward does not write to them).
    pub(crate) fn inputs_differ(&self, station: &Station, call: u32) -> Result<Vec<usize>> {
        let staged = self.staged_set(call) as usize;
        let mut differ = Vec::new();
        match self {
            Exchange::Device(d) => {
                let cmp = station
                    .cmp
                    .as_ref()
                    .ok_or_else(|| anyhow!("no comparator on this GPU"))?;
                fn bytes(t: &DevTensorOwned) -> DevTensor<'_> {
                    DevTensor {
                        buf: &t.buf,
                        dtype: Dtype::U8,
                        shape: vec![t.nbytes() as u64],
                    }
                }
                let pairs = d.staged(1, staged)?.iter().zip(d.staged(0, staged)?);
                for (i, (c, r)) in pairs.enumerate() {
                    let same = cmp
                        .compare(
                            &bytes(c),
                            &bytes(r),
                            None,
                            ToleranceProfile::Strict,
                            Precision::Fp32,
                        )?
                        .map(|cmp| cmp.passed())
                        .unwrap_or(false);
                    if !same {
                        differ.push(i);
                    }
                }
            }
            Exchange::Host(h) => {
                let [r, c] = &h.files;
                for (i, ((off, t), (coff, _))) in r.inputs.iter().zip(&c.inputs).enumerate() {
                    let a = read_at(&r.file, *off, t.nbytes())?;
                    let b = read_at(&c.file, *coff, t.nbytes());
                    if b.map_or(true, |b| a != b) {
                        differ.push(i);
                    }
                }
            }
        }
        Ok(differ)
    }
}

impl DeviceExchange {
    /// Side `side`'s staged set `staged`.
    fn staged(&self, side: usize, staged: usize) -> Result<&[DevTensorOwned]> {
        self.inputs[side]
            .get(staged)
            .map(Vec::as_slice)
            .ok_or_else(|| anyhow!("no staged set {staged}"))
    }

    fn set(&self, set: usize) -> Result<&[DevTensorOwned]> {
        self.source
            .get(set)
            .map(Vec::as_slice)
            .ok_or_else(|| anyhow!("no source set {set}"))
    }

    fn new(
        gpu: &Arc<Gpu>,
        layout: &CaseLayout,
        sets: usize,
        staged: usize,
        hold_outputs: u32,
    ) -> Result<Self> {
        let alloc = |ts: &[TensorLayout]| -> Result<Vec<DevTensorOwned>> {
            ts.iter()
                .map(|t| {
                    Ok(DevTensorOwned {
                        buf: gpu.alloc(t.nbytes() as usize)?,
                        dtype: t.dtype,
                        shape: t.shape.clone(),
                    })
                })
                .collect()
        };
        let input_sets = |n: usize| -> Result<Vec<Vec<DevTensorOwned>>> {
            (0..n).map(|_| alloc(&layout.inputs)).collect()
        };
        let l2 = gpu.l2_bytes().unwrap_or(0);
        // KernelBench's fallback when the L2 is unknown: 256 MiB.
        let flush = if l2 > 0 { 2 * l2 } else { 256 << 20 }.max(2 << 20);
        Ok(DeviceExchange {
            gpu: Arc::clone(gpu),
            source: input_sets(sets)?,
            inputs: [input_sets(staged.max(1))?, input_sets(staged.max(1))?],
            hold_outputs,
            outputs: [alloc(&layout.outputs)?, alloc(&layout.outputs)?],
            flush: gpu.alloc(flush)?,
        })
    }
}

impl HostExchange {
    fn new(layout: &CaseLayout, candidate_dir: &Path, sets: usize) -> Result<Self> {
        let reference_dir = tempfile::Builder::new()
            .prefix("kbench-ref-exchange-")
            .tempdir_in(crate::worker::fast_temp_dir())
            .context("creating the reference's exchange folder")?;
        let (ref_file, ref_path) = tempfile::Builder::new()
            .prefix("exchange-")
            .tempfile_in(reference_dir.path())
            .context("creating the reference's exchange file")?
            .into_parts();
        // A new name the candidate cannot have guessed, created exclusively (O_EXCL: never
        // through a link it planted).
        let (cand_file, cand_path) = tempfile::Builder::new()
            .prefix(".kbench-exchange-")
            .tempfile_in(candidate_dir)
            .with_context(|| {
                format!(
                    "creating the candidate's exchange file in {}",
                    candidate_dir.display()
                )
            })?
            .into_parts();
        let place = |ts: &[TensorLayout], start: &mut u64| -> Vec<(u64, TensorLayout)> {
            ts.iter()
                .map(|t| {
                    let off = start.div_ceil(ALIGN) * ALIGN;
                    *start = off + t.nbytes();
                    (off, t.clone())
                })
                .collect()
        };
        let mut files = Vec::new();
        for (file, path, with_source) in [
            (ref_file, ref_path.to_path_buf(), true),
            (cand_file, cand_path.to_path_buf(), false),
        ] {
            let mut end = 0u64;
            let source = if with_source {
                (0..sets).map(|_| place(&layout.inputs, &mut end)).collect()
            } else {
                Vec::new()
            };
            let inputs = place(&layout.inputs, &mut end);
            let outputs = place(&layout.outputs, &mut end);
            file.set_len(end.div_ceil(ALIGN) * ALIGN)
                .context("sizing an exchange file")?;
            files.push(HostFile {
                file,
                path,
                source,
                inputs,
                outputs,
            });
        }
        let candidate = files.pop().expect("two files");
        let reference = files.pop().expect("two files");
        // The reference's path is only its worker's concern; its TempPath is kept as the
        // folder, removed whole.
        let _ = ref_path.keep();
        Ok(HostExchange {
            files: [reference, candidate],
            _reference_dir: reference_dir,
            _candidate_file: cand_path,
        })
    }
}

impl HostFile {
    fn output(&self, k: usize) -> Result<HostTensor> {
        let (off, t) = self
            .outputs
            .get(k)
            .ok_or_else(|| anyhow!("no output {k}"))?;
        let bytes = read_at(&self.file, *off, t.nbytes())?;
        Ok(HostTensor::new(t.dtype, t.shape.clone(), bytes)?)
    }
}

/// `n` bytes at `off`; a file cut short (a candidate that truncated its own) is an error.
fn read_at(file: &File, off: u64, n: u64) -> Result<Vec<u8>> {
    let mut buf = vec![0u8; n as usize];
    file.read_exact_at(&mut buf, off)
        .map_err(|e| anyhow!("reading {n} bytes at {off} of an exchange file: {e}"))?;
    Ok(buf)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_source_set_lies_apart_in_the_references_file_alone() {
        let layout = CaseLayout {
            args: vec![ArgLayout::Staged(0), ArgLayout::Staged(1)],
            inputs: vec![
                TensorLayout {
                    dtype: Dtype::F32,
                    shape: vec![3, 5],
                },
                TensorLayout {
                    dtype: Dtype::I64,
                    shape: vec![7],
                },
            ],
            outputs: vec![TensorLayout {
                dtype: Dtype::F32,
                shape: vec![3],
            }],
        };
        let dir = tempfile::tempdir().unwrap();
        let h = HostExchange::new(&layout, dir.path(), 3).unwrap();
        let [r, c] = &h.files;
        assert_eq!(r.source.len(), 3);
        assert!(c.source.is_empty(), "the candidate's file holds no source");
        // No two buffers of the reference's file overlap.
        let mut spans: Vec<(u64, u64)> = r
            .source
            .iter()
            .flatten()
            .chain(&r.inputs)
            .chain(&r.outputs)
            .map(|(off, t)| (*off, off + t.nbytes()))
            .collect();
        spans.sort();
        assert!(spans.windows(2).all(|w| w[0].1 <= w[1].0), "{spans:?}");
        // Set 2's bytes are what a copy of set 2 puts into the candidate's staged inputs.
        let (off, n) = (r.source[2][1].0, r.source[2][1].1.nbytes());
        let bytes: Vec<u8> = (0..n).map(|i| i as u8).collect();
        r.file.write_all_at(&bytes, off).unwrap();
        let ex = Exchange::Host(h);
        ex.stage_into(Side::Candidate, 2).unwrap();
        let Exchange::Host(h) = &ex else {
            unreachable!()
        };
        let (coff, _) = &h.files[1].inputs[1];
        assert_eq!(read_at(&h.files[1].file, *coff, n).unwrap(), bytes);
        assert!(ex.stage_into(Side::Candidate, 3).is_err(), "no set 3");
    }
}
