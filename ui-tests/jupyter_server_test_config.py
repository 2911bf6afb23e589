"""Server configuration for the Galata tests (a real JupyterLab on localhost:8888, no token)."""
from jupyterlab.galata import configure_jupyter_server

configure_jupyter_server(c)  # noqa: F821

# The kernel the tests use is this environment's python3, where gpumem_kernel is installed.
c.ServerApp.root_dir = "."
# CI and the dev containers run as root.
c.ServerApp.allow_root = True
