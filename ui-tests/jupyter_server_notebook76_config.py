"""Server for the newest-Notebook 7 check: the compat check's server settings, on localhost:8893 and its own root."""

load_subconfig("jupyter_server_compat_config.py")  # noqa: F821
c.ServerApp.port = 8893  # noqa: F821
c.ServerApp.root_dir = "/tmp/gpumem-nb76"  # noqa: F821
