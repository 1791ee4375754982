"""The files of a candidate's build folder that kbench reads and writes around torch's ninja
run, for both light headers (`cuda_header`, `cxx_header`), their ninja run (`light_build`)
and the precompiled headers (`pch`): the steps `build.ninja` names, the steps ninja says
failed, the markers saying which header a folder was built with, and whole-file writes.

Kept apart from those modules so that each imports it and none imports another for these
helpers (`pch` builds the light C++ header's folder, and `cuda_header` wrote its files with
`pch`'s writer: an import cycle). Imports nothing of kbench_worker."""

import os
import re

# ninja's line for a failed step (`FAILED: [code=2] cuda.cuda.o` from ninja 1.13, without the
# code before), the whole rest of the line (an object's name may hold spaces).
_FAILED = re.compile(r"^FAILED: (?:\[code=\d+\] )?(.*?)\s*$", re.M)


def write_whole(path, text):
    """`text` into `path`, written beside it and renamed into place: a reader sees the
    whole file or none."""
    with open(path + ".partial", "w") as f:
        f.write(text)
    os.replace(path + ".partial", path)


def write_if_changed(path, text):
    """`text` into `path` (as `write_whole`) unless the file holds it already; a file that
    cannot be read, or not as text, is written. For headers ninja keeps among the objects'
    dependencies: a new modification time would compile them all again."""
    try:
        with open(path) as f:
            if f.read() == text:
                return
    except (OSError, UnicodeDecodeError):
        pass
    write_whole(path, text)


def edge_outputs(build_directory, edge):
    """The outputs of the steps of `build.ninja` that `edge` (a compiled pattern whose group 1
    is the output, `$`-escaped as ninja writes it) matches, as absolute paths, or None when
    there are none or the file cannot be read."""
    try:
        with open(os.path.join(build_directory, "build.ninja")) as f:
            text = f.read()
    except OSError:
        return None
    outs = []
    for line in text.splitlines():
        m = edge.match(line)
        if m:
            out = m.group(1).replace("$ ", " ").replace("$:", ":").replace("$$", "$")
            outs.append(os.path.join(os.path.abspath(build_directory), out))
    return outs or None


def failed_steps(build_directory, exc):
    """The outputs of the steps ninja says failed in torch's error `exc` (absolute paths)."""
    return [os.path.join(os.path.abspath(build_directory), t) for t in _FAILED.findall(str(exc))]


def read_marker(build_directory, name):
    """What the marker file `name` of a build folder says, or ""."""
    try:
        with open(os.path.join(build_directory, name)) as f:
            return f.read().strip()
    except OSError:
        return ""


def write_marker(build_directory, name, which):
    """`which` as the marker file `name` of a build folder; a folder that cannot be written
    keeps no marker (the next load then tries the light header again)."""
    try:
        with open(os.path.join(build_directory, name), "w") as f:
            f.write(which + "\n")
    except OSError:
        pass
