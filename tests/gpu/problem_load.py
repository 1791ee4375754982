"""A KernelBench problem file loaded as kbench's reference loads it, for the GPU suite's
plain-process scripts (`autotune_plain.py`, `launch_drift.py`, `placement_states.py`): the
module executed, then `Model(*get_init_inputs())` under seed 0 moved to the device, and
`get_inputs()` with its tensors moved there too. The scripts run as `python3 tests/gpu/X.py`,
so this folder is on their import path."""

import importlib.util

import torch


def load_problem(path, device):
    """(model, inputs) of the problem at `path` on `device`."""
    spec = importlib.util.spec_from_file_location("problem", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    torch.manual_seed(0)
    model = module.Model(*module.get_init_inputs()).to(device)
    inputs = [x.to(device) if isinstance(x, torch.Tensor) else x for x in module.get_inputs()]
    return model, inputs
