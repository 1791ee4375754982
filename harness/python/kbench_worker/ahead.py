"""Building ahead (PROTOCOL.md, "build"): a build job's pass over a candidate, on the CPU with
no GPU visible, that reaches the candidate's extension builds wherever its code makes them,
so that its evaluating worker finds them in the build cache.

Models write `load_inline` at module level, in `__init__`, in a helper method or in the first
forward, and guard it behind `torch.cuda.is_available()` or after device work that fails
without a GPU. Importing the module reaches only the first kind. The pass goes further, each
step best effort, in order:

1. import the candidate (module-level builds);
2. construct `ModelNew` on the CPU (builds in `__init__`);
3. every call site of `load_inline`/`load` in the source that did not run yet, with its
   arguments evaluated from the module's globals and the simple assignments before it in its
   function (builds in methods, in forward, behind guards); the call's function is evaluated
   too and must be torch's own, so an alias or a wrapper of the candidate's is never called
   for a name that only looks alike;
4. if sites are still unbuilt and the model was constructed, one forward on the problem's own
   inputs made on the meta device (shapes without data), bounded by `forward_s` (builds that
   need run-time values).

Nothing here decides a verdict: the evaluating worker imports, constructs and builds again,
and a build the pass could not reach is built there, in place. A build the pass makes with
arguments the candidate would not have used costs only time (ninja rebuilds from the
sources the evaluating worker writes).

Triton kernels compile at their first launch, which needs a GPU: they compile in place.
"""

import ast
import os
import signal
import time

import torch

from .build_failures import install_recording as install_failure_record
from .loading import _exec_candidate, _exec_problem, _read_source
from .protocol import WorkerError, _clean_text, _describe, _field, _is_int
from .tensors import seed_all
from .written_sources import extension_name
from .written_sources import record as record_sources

# The names of torch's extension builders this pass reaches.
_BUILDERS = ("load_inline", "load")


class _Recorder:
    """torch's builders wrapped for the pass: every call recorded (its name, whether it built,
    its seconds), the forward's alarm paused while one builds and re-armed after with the
    time it had left (an alarm inside a build would kill the compiler midway, and a build's
    time is not the forward's)."""

    def __init__(self, cpp_extension):
        self.cpp_extension = cpp_extension
        self.calls = []
        self.originals = {n: getattr(cpp_extension, n) for n in _BUILDERS}
        self.wrapped = {n: self._wrap(n, f) for n, f in self.originals.items()}

    def _wrap(self, builder, fn):
        def build(*args, **kwargs):
            name = extension_name(args, kwargs)
            t0 = time.perf_counter()
            # Disarmed, not blocked: a blocked alarm that came due during a long build fired
            # the moment it was unblocked, before the build that had just succeeded was
            # recorded, and a complete build job read as an incomplete one.
            left = signal.setitimer(signal.ITIMER_REAL, 0)[0]
            try:
                try:
                    result = fn(*args, **kwargs)
                except BaseException as exc:
                    self.calls.append({"builder": builder, "name": name, "ok": False,
                                       "seconds": time.perf_counter() - t0,
                                       "error": _clean_text(_describe(exc), 400)})
                    raise
                self.calls.append({"builder": builder, "name": name, "ok": True,
                                   "seconds": time.perf_counter() - t0})
                if builder == "load":
                    record_sources(self.cpp_extension, args, kwargs)
            finally:
                if left > 0:
                    signal.setitimer(signal.ITIMER_REAL, left)
            return result

        build.__wrapped__ = fn
        return build

    def install(self):
        for n, f in self.wrapped.items():
            setattr(self.cpp_extension, n, f)

    def uninstall(self):
        for n, f in self.originals.items():
            setattr(self.cpp_extension, n, f)

    def which(self, obj):
        """The builder `obj` is (torch's own or its wrapper here), or None."""
        for n in _BUILDERS:
            if obj is self.wrapped[n] or obj is self.originals[n]:
                return n
        return None

    def called_names(self):
        """Names already built, or already failed (a failure is not tried again)."""
        return {c["name"] for c in self.calls}


_DEFS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)


def _own_nodes(scope_node):
    """The nodes of a module or function body, not those of the functions and classes
    defined inside it (each of those is a scope of its own)."""
    todo = list(ast.iter_child_nodes(scope_node))
    while todo:
        node = todo.pop()
        yield node
        if not isinstance(node, _DEFS):
            todo.extend(ast.iter_child_nodes(node))


def _call_sites(tree):
    """Every call in the module, each with the assignments that come before it in its own
    scope (its function, or the module), in source order, wherever they sit in that scope:
    a value made in a branch before the call is tried too."""
    sites = []
    scopes = [tree] + [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    for scope_node in scopes:
        nodes = list(_own_nodes(scope_node))
        assigns = sorted(
            (n for n in nodes if isinstance(n, (ast.Assign, ast.AnnAssign, ast.AugAssign))),
            key=lambda n: (n.lineno, n.col_offset),
        )
        for call in (n for n in nodes if isinstance(n, ast.Call)):
            prior = [a for a in assigns if (a.lineno, a.col_offset) < (call.lineno, call.col_offset)]
            sites.append((call, prior))
    return sites


def _scope(globals_, prior):
    """The module's globals and the simple assignments before a call (`x = ...`, `x += ...`
    to plain names), each tried once, in order; one that fails is skipped."""
    scope = dict(globals_)
    for stmt in prior:
        if isinstance(stmt, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
            if all(isinstance(t, ast.Name) for t in targets) and getattr(stmt, "value", None) is not None:
                try:
                    exec(compile(ast.Module([stmt], []), "<kbench ahead>", "exec"), scope)
                except Exception:
                    pass
    return scope


def _evaluate(node, scope):
    return eval(compile(ast.Expression(node), "<kbench ahead>", "eval"), scope)


def _static_pass(tree, globals_, recorder):
    """Step 3: the call sites of torch's builders not yet built, called with their arguments
    evaluated. Returns how many sites were found and how many of them could not be reached."""
    found = unreached = 0
    for call, prior in _call_sites(tree):
        func = call.func
        callee = func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)
        if callee not in _BUILDERS:
            continue
        scope = _scope(globals_, prior)
        try:
            fn = _evaluate(func, scope)
        except Exception:
            fn = None
        builder = None if fn is None else recorder.which(fn)
        if builder is None:
            continue
        found += 1
        # `*args` and `**kwargs` are the caller's: not known here.
        if any(isinstance(a, ast.Starred) for a in call.args) or any(k.arg is None for k in call.keywords):
            unreached += 1
            continue
        try:
            args = [_evaluate(a, scope) for a in call.args]
            kwargs = {k.arg: _evaluate(k.value, scope) for k in call.keywords}
        except Exception:
            unreached += 1
            continue
        if extension_name(args, kwargs) in recorder.called_names():
            continue
        try:
            recorder.wrapped[builder](*args, **kwargs)
        except Exception:
            pass
    return found, unreached


class _ForwardTimeout(Exception):
    pass


def _first_forward(model, get_inputs, seed, limit_s):
    """Step 4: one forward on the CPU, the problem's own inputs, stopped after `limit_s`
    (an alarm, paused while a build runs)."""

    def expire(signum, frame):
        raise _ForwardTimeout()

    old = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, limit_s)
    try:
        seed_all(seed)
        # On the meta device: the inputs keep their shapes and dtypes and cost no memory or
        # time (a level-1 problem's inputs reach gigabytes); a build comes before the first
        # kernel it serves, and what fails after it (a CPU or meta tensor where the kernel
        # wants CUDA) fails after the build is done.
        with torch.device("meta"):
            inputs = list(get_inputs())
        with torch.no_grad():
            model(*inputs)
        return "ran"
    except _ForwardTimeout:
        return "timed out"
    except (Exception, SystemExit):
        return "raised"
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


class AheadCommands:
    """The Worker's `build` command."""

    def cmd_build(self, cmd, payload):
        t0 = time.perf_counter()
        if self.role != "candidate":
            raise WorkerError("protocol", "build", "build runs in the candidate role only")
        problem_path = _field(cmd, "problem_path", str, "build")
        candidate_path = _field(cmd, "candidate_path", str, "build")
        build_dir = _field(cmd, "build_dir", str, "build")
        forward_s = cmd.get("forward_s", 60)
        if not isinstance(forward_s, (int, float)) or isinstance(forward_s, bool) or forward_s < 0:
            raise WorkerError("protocol", "build", f"forward_s must be a non-negative number, got {forward_s!r}")
        weight_seed = cmd.get("weight_seed", 0)
        if not _is_int(weight_seed):
            raise WorkerError("protocol", "build", f"weight_seed must be an int, got {weight_seed!r}")
        os.makedirs(build_dir, exist_ok=True)
        os.environ["TORCH_EXTENSIONS_DIR"] = build_dir
        # Imported here, not at the worker's start: it imports setuptools (a build job's cost).
        import torch.utils.cpp_extension as cpp_extension

        recorder = _Recorder(cpp_extension)
        recorder.install()
        install_failure_record(cpp_extension)
        try:
            return self._build_pass(problem_path, candidate_path, forward_s, weight_seed, recorder, t0)
        finally:
            recorder.uninstall()

    def _build_pass(self, problem_path, candidate_path, forward_s, weight_seed, recorder, t0):
        steps = {}

        module, get_inputs, init = _exec_problem(problem_path, weight_seed, "build")

        source = model = None
        try:
            source = _read_source(candidate_path, "candidate")
            factory = _exec_candidate(module, candidate_path, source)
            steps["import"] = "ran"
        except WorkerError:
            factory = None
            steps["import"] = "raised"
        if factory is not None:
            try:
                seed_all(weight_seed)
                model = factory(*init)
                steps["construct"] = "ran"
            except (Exception, SystemExit):
                steps["construct"] = "raised"

        try:
            tree = None if source is None else ast.parse(source, candidate_path)
        except (SyntaxError, ValueError):
            tree = None
        found = unreached = 0
        if tree is not None:
            found, unreached = _static_pass(tree, module.__dict__, recorder)
            steps["sites"] = "ran"
        # Sites left that no argument evaluation reached, or a source whose builds no site
        # shows (a builder called through a name of the candidate's own): the first call.
        if model is not None and (unreached > 0 or not recorder.calls) and forward_s > 0:
            before = len(recorder.calls)
            steps["forward"] = _first_forward(model, get_inputs, weight_seed, float(forward_s))
            # The first call built what the sites could not reach: counted as reached.
            if len(recorder.calls) > before:
                unreached = 0

        failed = [c for c in recorder.calls if not c["ok"]]
        built = [c for c in recorder.calls if c["ok"]]
        return {
            "type": "built",
            "build_s": time.perf_counter() - t0,
            "sites": found,
            "unreached": unreached,
            "calls": len(recorder.calls),
            "built": len(built),
            "failed": len(failed),
            # Every builder call site found ran and built: the cache holds all of it.
            "complete": bool(built) and not failed and unreached == 0,
            "steps": steps,
            "errors": [c["error"] for c in failed][:4],
        }, []
