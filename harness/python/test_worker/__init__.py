"""End-to-end tests of the kbench_worker package on CPU: start it as a subprocess in both
roles and speak the framed protocol of PROTOCOL.md to it. From harness/python:

    /root/.cache/kbench/venv/bin/python -m unittest test_worker -v

One module per part of the worker (support.py is the test client). Every test class is
re-exported here, so `test_worker` runs them all and `test_worker.CudaTests` names one.

Workers are shared within a test class (a worker may be sent `load` again) because each
start imports torch, which takes seconds.
"""

from .test_audit import AuditTests
from .test_candidate import CandidateTests, ExtensionBuildTests
from .test_cost import CostAndProfileTests
from .test_cuda import CudaStressTests, CudaTests, DeviceIoTests
from .test_families import CaseFamilyTests
from .test_probes import ProbeReferenceTests
from .test_integrity import CpuHeapTests, IntegrityProbeTests
from .test_modes import ModeTests
from .test_protocol import DriverSplitTests, HelloAndReferenceTests, PriorityTests, ProcessTests
from .test_stability import StabilityTests

__all__ = [
    "AuditTests",
    "CandidateTests",
    "CaseFamilyTests",
    "CostAndProfileTests",
    "CpuHeapTests",
    "CudaStressTests",
    "CudaTests",
    "DeviceIoTests",
    "DriverSplitTests",
    "ExtensionBuildTests",
    "HelloAndReferenceTests",
    "IntegrityProbeTests",
    "ModeTests",
    "PriorityTests",
    "ProcessTests",
    "StabilityTests",
]


def load_tests(loader, tests, pattern):
    """The classes above are every test: discovery must not load the modules a second time."""
    return tests
