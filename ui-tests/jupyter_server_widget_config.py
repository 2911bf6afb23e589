"""Server for the output-area watch check (widget/): the compat check's settings on localhost:8892, from an
environment with JupyterLab, Notebook 7, ipywidgets and anywidget and no jupyterlab-gpumem (scripts/test.sh)."""

load_subconfig("jupyter_server_compat_config.py")  # noqa: F821
c.ServerApp.port = 8892  # noqa: F821
c.ServerApp.root_dir = "/tmp/gpumem-widget"  # noqa: F821
# Its own settings and workspaces: the theme this check switches never reaches another server's JupyterLab.
c.LabServerApp.user_settings_dir = "/tmp/gpumem-widget/.settings"  # noqa: F821
c.LabServerApp.workspaces_dir = "/tmp/gpumem-widget/.workspaces"  # noqa: F821
