"""Server for the newest-JupyterLab check: localhost:8890, no token (loopback only), as root in CI."""
c.ServerApp.port = 8890  # noqa: F821
c.ServerApp.ip = "127.0.0.1"  # noqa: F821
c.ServerApp.open_browser = False  # noqa: F821
c.IdentityProvider.token = ""  # noqa: F821
c.ServerApp.password = ""  # noqa: F821
c.ServerApp.disable_check_xsrf = True  # noqa: F821
c.ServerApp.allow_root = True  # noqa: F821
c.ServerApp.root_dir = "/tmp/gpumem-compat"  # noqa: F821
