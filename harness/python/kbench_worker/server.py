"""The command loop: one Worker, every command group (a mixin each) over one Session,
answering frames until `exit` or the end of the channel."""

import sys
import time

import torch

from .ahead import AheadCommands
from .audit import AuditCommands
from .cases import CaseCommands
from .conventions import ConventionCommands
from .cost import CostCommands
from .integrity import IntegrityCommands
from .ipc import DeviceCaseCommands
from .loading import LoadCommands
from .modes import ModeCommands
from .protocol import (
    DRIVER_SPLIT,
    EXIT_OK,
    TRACE,
    Channel,
    WorkerError,
    _describe,
    _error_header,
    _format_tb,
    check_command,
    driver_split_line,
)
from .session import Session
from .timing import TimingCommands



class Worker(
    LoadCommands,
    AheadCommands,
    CaseCommands,
    DeviceCaseCommands,
    CostCommands,
    ConventionCommands,
    AuditCommands,
    TimingCommands,
    IntegrityCommands,
    ModeCommands,
    Session,
):
    """A worker process's one session: every command group, a mixin each, over the state
    they share (session.Session)."""

    # -- loop ---------------------------------------------------------------------------

    PHASES = {
        "load": "load", "build": "load", "make_case": "run", "run_case": "run", "export": "run", "audit": "run",
        "profile": "run", "cost": "run", "eval_case": "run", "time_as": "run", "time_open": "time", "stage_inputs": "time",
        "timed_call": "time", "release": "time", "time_close": "time",
    }  # fmt: skip

    def serve(self):
        handlers = {
            "load": self.cmd_load,
            "build": self.cmd_build,
            "make_case": self.cmd_make_case,
            "run_case": self.cmd_run_case,
            "time_open": self.cmd_time_open,
            "stage_inputs": self.cmd_stage_inputs,
            "timed_call": self.cmd_timed_call,
            "release": self.cmd_release,
            "time_close": self.cmd_time_close,
            "export": self.cmd_export,
            "audit": self.cmd_audit,
            "cost": self.cmd_cost,
            "profile": self.cmd_profile,
            "eval_case": self.cmd_eval_case,
            "time_as": self.cmd_time_as,
        }
        while True:
            frame = self.channel.read_frame()
            if frame is None:
                return EXIT_OK  # the harness closed the channel: nothing left to answer
            cmd, payload = frame
            name = cmd.get("cmd")
            req_id = cmd.get("id")  # echoed so the harness can match answers to commands
            phase = self.PHASES.get(name) if isinstance(name, str) else None
            try:
                check_command(cmd, phase)
            except WorkerError as exc:
                del frame, payload
                header = _error_header(exc.kind, exc.phase, exc.message)
                header["id"] = req_id
                self.channel.send(Channel.encode(header))
                continue
            if name == "exit":
                if TRACE:
                    print(f"kbench worker: {self.role} exit {time.time():.3f}", file=sys.stderr, flush=True)
                self.channel.write_frame({"type": "bye", "id": req_id})
                return EXIT_OK
            handler = handlers.get(name)
            del frame
            if handler is None:
                # `proceed` is read only inside a gated `load`.
                header = _error_header("protocol", None, f"unknown command {name!r}")
                header["id"] = req_id
                buffers = Channel.encode(header)
            else:
                DRIVER_SPLIT.clear()  # what ran between commands is not this command's
                t0 = time.time()
                buffers = self._answer(handler, cmd, payload, phase)
                if TRACE:
                    print(f"kbench worker: {self.role} {name} {t0:.3f} +{time.time() - t0:.3f}s",
                          file=sys.stderr, flush=True)
                    split = driver_split_line(self.role, name)
                    if split:
                        print(split, file=sys.stderr, flush=True)
            del payload
            self.channel.send(buffers)

    def _answer(self, handler, cmd, payload, phase):
        """Runs one command and encodes its reply; every failure becomes an error frame."""
        try:
            with torch.no_grad():
                reply, tensors = handler(cmd, payload)
            reply["id"] = cmd.get("id")
            return Channel.encode(reply, tensors)
        except WorkerError as exc:
            header = _error_header(exc.kind, exc.phase or phase, exc.message, exc.tb)
            if exc.integrity:
                header["integrity"] = exc.integrity
        except (Exception, SystemExit) as exc:
            header = _error_header("runtime_error", phase, _describe(exc), _format_tb(exc))
        header["id"] = cmd.get("id")
        return Channel.encode(header)
