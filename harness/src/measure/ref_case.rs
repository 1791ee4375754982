//! One correctness case as the reference made it (its inputs, outputs and float64 outputs,
//! in host memory on CPU, in harness-owned GPU buffers on CUDA), and the GPU tensor type
//! those buffers are; what the reference's reply says of a case besides its tensors (its
//! longest input axis, whether a stress case applies). Owned by `measure::reference`, read
//! by the judges.

use std::sync::Arc;

use kbench_adversarial::Float64Gate;
use kbench_record::protocol::{reply, Frame, TensorSpec};
use kbench_record::{CaseRef, Dtype, HostTensor, Precision};
use serde_json::{json, Value};

use crate::gpu::compare::DevTensor;
use crate::gpu::devmem::DevBuf;

/// A tensor in a harness-owned GPU buffer.
pub(crate) struct DevTensorOwned {
    pub(crate) buf: DevBuf,
    pub(crate) dtype: Dtype,
    pub(crate) shape: Vec<u64>,
}

impl DevTensorOwned {
    pub(crate) fn view(&self) -> DevTensor<'_> {
        DevTensor {
            buf: &self.buf,
            dtype: self.dtype,
            shape: self.shape.clone(),
        }
    }

    /// What a worker needs to map it: `{handle, dtype, shape, nbytes}`.
    pub(crate) fn spec(&self) -> TensorSpec {
        TensorSpec {
            handle: Some(self.buf.ipc_handle().to_string()),
            offset: None,
            dtype: self.dtype.as_str().into(),
            shape: self.shape.clone(),
            nbytes: self.nbytes() as u64,
            name: None,
        }
    }

    pub(crate) fn nbytes(&self) -> usize {
        self.shape.iter().product::<u64>() as usize * self.dtype.size()
    }
}

/// A case's tensors, where they live.
pub(crate) enum CaseData {
    /// CPU runs: a ready `run_case` frame carrying the inputs, and host outputs.
    Host {
        run_frame: Arc<Frame>,
        outputs: Vec<HostTensor>,
        outputs_f64: Option<Vec<HostTensor>>,
        /// `nan-inf` cases: per output, the probe reference (see `measure/probe.rs`).
        outputs_alt: Option<Vec<Option<HostTensor>>>,
    },
    /// CUDA runs: everything in harness-owned GPU buffers; only the argument list is JSON.
    Device {
        args: Value,
        inputs: Vec<(String, DevTensorOwned)>,
        outputs: Vec<DevTensorOwned>,
        outputs_f64: Option<Vec<DevTensorOwned>>,
        outputs_alt: Option<Vec<Option<DevTensorOwned>>>,
    },
}

/// One correctness case as the reference produced it.
pub(crate) struct RefCase {
    pub(crate) case: CaseRef,
    pub(crate) forward_seed: u64,
    pub(crate) data: CaseData,
    /// Why a stress case does not apply to this problem (the candidate is not run on it).
    pub(crate) not_applicable: Option<String>,
    /// Inputs the reference's own forward writes to (an in-place problem): a candidate
    /// writing to them is not flagged `input-mutated`.
    pub(crate) mutated_inputs: Vec<u64>,
    /// Elements along the longest axis of any tensor input (0 when none): the longest sum
    /// along one axis of an input, which sets the case's float64 gate ([`Self::gate`]).
    pub(crate) longest_input_axis: u64,
}

impl RefCase {
    /// The strict profile's float64 gate for this case (see
    /// [`kbench_adversarial::Float64Gate::for_case`]).
    pub(crate) fn gate(&self, precision: Precision) -> Float64Gate {
        case_gate(precision, &self.case, self.longest_input_axis)
    }

    pub(crate) fn num_outputs(&self) -> usize {
        match &self.data {
            CaseData::Host { outputs, .. } => outputs.len(),
            CaseData::Device { outputs, .. } => outputs.len(),
        }
    }

    /// Bytes of the case's inputs and working-precision outputs: what each side's timed
    /// calls hold (their input copies and outputs are multiples of it).
    pub(crate) fn io_bytes(&self) -> u64 {
        match &self.data {
            CaseData::Host {
                run_frame, outputs, ..
            } => {
                run_frame.payload.len() as u64
                    + outputs.iter().map(|o| o.data().len() as u64).sum::<u64>()
            }
            CaseData::Device {
                inputs, outputs, ..
            } => inputs
                .iter()
                .map(|(_, t)| t)
                .chain(outputs)
                .map(|t| t.nbytes() as u64)
                .sum(),
        }
    }

    /// Every byte the case holds: [`Self::io_bytes`] and its float64 and probe outputs.
    pub(super) fn bytes(&self) -> u64 {
        self.io_bytes()
            + match &self.data {
                CaseData::Host {
                    outputs_f64,
                    outputs_alt,
                    ..
                } => extra_bytes(outputs_f64, outputs_alt, |o| o.data().len()),
                CaseData::Device {
                    outputs_f64,
                    outputs_alt,
                    ..
                } => extra_bytes(outputs_f64, outputs_alt, DevTensorOwned::nbytes),
            }
    }

    /// A stress case that does not apply (`why`), without its tensors: nothing is run or
    /// judged on it, and every candidate of the problem gets the same answer.
    pub(crate) fn not_applicable(case: CaseRef, why: String) -> RefCase {
        RefCase {
            case,
            forward_seed: 0,
            data: CaseData::Host {
                run_frame: Arc::new(Frame::new(json!({}))),
                outputs: Vec::new(),
                outputs_f64: None,
                outputs_alt: None,
            },
            not_applicable: Some(why),
            mutated_inputs: Vec::new(),
            longest_input_axis: 0,
        }
    }
}

/// Bytes of a case's float64 and probe outputs, host or device alike (`size`: one tensor's).
fn extra_bytes<T>(
    outputs_f64: &Option<Vec<T>>,
    outputs_alt: &Option<Vec<Option<T>>>,
    size: impl Fn(&T) -> usize,
) -> u64 {
    outputs_f64
        .iter()
        .flatten()
        .chain(outputs_alt.iter().flatten().flatten())
        .map(|t| size(t) as u64)
        .sum()
}

/// The strict profile's float64 gate for `case`, whose longest input axis is `longest_axis`:
/// the one rule for the judges ([`RefCase::gate`]) and for whether a stress case applies.
pub(crate) fn case_gate(precision: Precision, case: &CaseRef, longest_axis: u64) -> Float64Gate {
    kbench_adversarial::float64_gate(precision).for_case(&case.family, longest_axis)
}

/// The longest axis of a made case's tensor inputs (`in:*`): from the device tensors the
/// reference described, or from the shapes in its reply's payload. 0 when there is none or
/// the payload cannot be read (taking the case then reports that).
pub(crate) fn longest_input_axis(reply: &Frame, device_tensors: Option<&[Value]>) -> u64 {
    let shapes: Vec<(String, Vec<u64>)> = match device_tensors {
        Some(specs) => specs
            .iter()
            .filter_map(|spec| {
                let name = spec.get("name")?.as_str()?.to_string();
                let shape = serde_json::from_value(spec.get("shape")?.clone()).ok()?;
                Some((name, shape))
            })
            .collect(),
        None => reply.tensor_shapes().unwrap_or_default(),
    };
    shapes
        .iter()
        .filter(|(name, _)| name.starts_with("in:"))
        .flat_map(|(_, shape)| shape.iter().copied())
        .max()
        .unwrap_or(0)
}

/// A stress case's applicability from the reference worker's reply (`transformed` and the
/// `stability` measurements: PROTOCOL.md, `make_case`), by [`kbench_adversarial::not_applicable`].
pub(crate) fn applicability(
    case: &CaseRef,
    made: &reply::Case,
    tol: kbench_adversarial::Tolerance,
    floor: Option<f64>,
) -> Option<String> {
    let stability = |key: &str| {
        made.stability
            .as_ref()
            .and_then(|s| s.get(key))
            .filter(|v| v.is_object())
            .map(|v| kbench_adversarial::Stability {
                max_excess: v.get("max_excess").and_then(Value::as_f64),
                nan_mismatch: v.get("nan_mismatch").and_then(Value::as_u64).unwrap_or(0),
                elements: v.get("elements").and_then(Value::as_u64).unwrap_or(0),
                rel_l2: v.get("rel_l2").and_then(Value::as_f64),
            })
    };
    kbench_adversarial::not_applicable(
        &case.family,
        made.transformed,
        stability("repeat").as_ref(),
        stability("f64").as_ref(),
        tol,
        floor,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_longest_input_axis_comes_from_inputs_only_on_either_path() {
        // Device path: the described tensors; outputs do not count.
        let specs = vec![
            json!({"name": "in:0", "dtype": "f32", "shape": [16, 16384], "nbytes": 1}),
            json!({"name": "in:1", "dtype": "f32", "shape": [3], "nbytes": 1}),
            json!({"name": "out:0", "dtype": "f32", "shape": [1 << 20], "nbytes": 1}),
        ];
        let empty = Frame::new(json!({}));
        assert_eq!(longest_input_axis(&empty, Some(&specs)), 16_384);
        // Host path: the payload's shapes.
        let x = HostTensor::from_f32(vec![2, 5], &[0.0; 10]).unwrap();
        let y = HostTensor::from_f32(vec![7], &[0.0; 7]).unwrap();
        let f = Frame::with_tensors(
            json!({"type": "case"}),
            &[("in:0".into(), &x), ("out:0".into(), &y)],
        );
        assert_eq!(longest_input_axis(&f, None), 5);
        // No tensor input: 0, the gate's own floor.
        assert_eq!(longest_input_axis(&empty, None), 0);
    }
}
