"""Makes the package of this checkout importable, whether or not it is installed, and keeps
proxies from the environment away from the tests' 127.0.0.1 servers. With
KBENCH_CLIENT_INSTALLED=1 the tests take the installed package instead, and fail if the one
they import is not the installed one."""

import os
import sys

if os.environ.get("KBENCH_CLIENT_INSTALLED") == "1":
    import kbench_client

    if "site-packages" not in kbench_client.__file__:
        raise ImportError(f"KBENCH_CLIENT_INSTALLED=1, but kbench_client is {kbench_client.__file__}")
else:
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
for var in ("no_proxy", "NO_PROXY"):
    os.environ[var] = ",".join(filter(None, [os.environ.get(var), "127.0.0.1", "localhost"]))
