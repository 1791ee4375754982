//! Running one case with device I/O: the inputs are copied into buffers of the candidate's
//! own (so whatever it writes there never reaches the reference's copy), and its outputs land
//! in NaN-poisoned slots shaped like the reference's. What comes back is raw: the worker's
//! answer and the slots, for `judge::device` to compare on the GPU.

use std::time::Instant;

use std::collections::BTreeMap;

use kbench_record::protocol::{Command, Frame, Poison, RunCase};

use super::reference::{CaseData, DevTensorOwned, RefCase};
use super::{Ctx, Station};
use crate::worker::{Worker, WorkerFault};

/// Why a device case has no answer to judge.
pub(crate) enum DeviceCaseError {
    /// The candidate's worker failed (crash, timeout, protocol).
    Fault(WorkerFault),
    /// The harness failed (device memory).
    Harness(anyhow::Error),
}

/// A device case the candidate answered: its reply, the output slots it wrote, and the
/// case's wall time (request to answer).
pub(crate) struct DeviceRun {
    pub(crate) reply: Frame,
    pub(crate) slots: Vec<DevTensorOwned>,
    pub(crate) wall_s: f64,
}

/// The buffers of one device case, allocated and filled, and the command naming them.
pub(crate) struct PreparedCase {
    copies: Vec<DevTensorOwned>,
    slots: Vec<DevTensorOwned>,
    cmd: Command,
}

/// Allocates the candidate's copy of the inputs and its NaN-poisoned output slots.
pub(crate) fn prepare_device_case(station: &Station, rc: &RefCase) -> anyhow::Result<PreparedCase> {
    let CaseData::Device {
        args,
        inputs,
        outputs,
        ..
    } = &rc.data
    else {
        unreachable!("prepare_device_case on a host case")
    };
    let gpu = station.gpu.as_ref().expect("device case without a GPU");
    let mut dev_inputs = BTreeMap::new();
    let mut copies = Vec::with_capacity(inputs.len());
    for (name, t) in inputs {
        let buf = gpu.alloc(t.nbytes())?;
        gpu.copy(&buf, &t.buf, t.nbytes())?;
        let copy = DevTensorOwned {
            buf,
            dtype: t.dtype,
            shape: t.shape.clone(),
        };
        dev_inputs.insert(name.clone(), copy.spec());
        copies.push(copy);
    }
    let slots = output_slots(gpu, outputs)?;
    for s in &slots {
        // NaN-filled (all ones bits) so an element the candidate never wrote cannot pass.
        gpu.fill(&s.buf, 0xff)?;
    }
    let cmd = Command::RunCase(RunCase {
        forward_seed: rc.forward_seed,
        inputs: args.clone(),
        device_inputs: Some(dev_inputs),
        device_outputs: Some(slots.iter().map(DevTensorOwned::spec).collect()),
        poison: outputs
            .iter()
            .map(|o| Poison {
                dtype: o.dtype.as_str().into(),
                nbytes: o.nbytes() as u64,
            })
            .collect(),
        // Stress cases come after timing: the worker's copy of the inputs is never used
        // again, and the reference makes the next case on the same GPU meanwhile.
        release_case: Some(rc.case.family != kbench_record::CaseFamily::Random),
        return_inputs: None,
    });
    Ok(PreparedCase { copies, slots, cmd })
}

/// Sends a prepared case to the candidate and waits for its answer.
pub(crate) fn send_device_case(
    ctx: &Ctx,
    worker: &mut Worker,
    prepared: PreparedCase,
    tc: Instant,
) -> Result<DeviceRun, DeviceCaseError> {
    let PreparedCase { copies, slots, cmd } = prepared;
    let reply = worker
        .request(Frame::command(&cmd), ctx.config.timeouts.run)
        .map_err(DeviceCaseError::Fault)?;
    let wall_s = tc.elapsed().as_secs_f64();
    drop(copies);
    Ok(DeviceRun {
        reply,
        slots,
        wall_s,
    })
}

/// One harness buffer per reference output, of its dtype and shape (contents undefined).
fn output_slots(
    gpu: &std::sync::Arc<crate::gpu::devmem::Gpu>,
    outputs: &[DevTensorOwned],
) -> anyhow::Result<Vec<DevTensorOwned>> {
    outputs
        .iter()
        .map(|o| {
            Ok(DevTensorOwned {
                buf: gpu.alloc(o.nbytes())?,
                dtype: o.dtype,
                shape: o.shape.clone(),
            })
        })
        .collect()
}
