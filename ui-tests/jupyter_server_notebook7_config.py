"""Server for the Notebook 7 check: the compat check's server settings, on localhost:8891 and its own root."""

load_subconfig("jupyter_server_compat_config.py")  # noqa: F821
c.ServerApp.port = 8891  # noqa: F821
c.ServerApp.root_dir = "/tmp/gpumem-nb7"  # noqa: F821
