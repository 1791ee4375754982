"""Makes the package of this checkout importable, whether or not it is installed, and keeps
proxies from the environment away from the tests' 127.0.0.1 servers."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
for var in ("no_proxy", "NO_PROXY"):
    os.environ[var] = ",".join(filter(None, [os.environ.get(var), "127.0.0.1", "localhost"]))
