"""Stand-in for the get-pip bootstrap script that ansible-test downloads from a host this sandbox cannot reach.

ansible-test runs it inside a fresh `--without-pip` virtual environment with pip-install arguments
(`pip==X`, options) plus get-pip's own `--no-setuptools`/`--no-wheel`. Python's bundled ensurepip
provides a pip, which then installs exactly what was asked for from the package index.
`make sanity` copies this file to ~/.ansible/test/cache/get_pip_<version>.py.
"""

import ensurepip
import runpy
import sys

ensurepip.bootstrap(upgrade=True)
args = [a for a in sys.argv[1:] if a not in ("--no-setuptools", "--no-wheel")]
sys.argv = ["pip", "install", *args]
runpy.run_module("pip", run_name="__main__", alter_sys=True)
