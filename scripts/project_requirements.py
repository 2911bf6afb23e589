"""Prints pyproject.toml's requirements, one per line: the package's dependencies and its `test` extra (what
`pip install -e ".[test]"` brings). setup.sh installs them while the labextension builds; test_newest_torch.sh
installs them beside the newest torch."""

from pathlib import Path

try:
    import tomllib
except ImportError:  # Python before 3.11: the copy pip vendors
    from pip._vendor import tomli as tomllib

PYPROJECT = Path(__file__).resolve().parent.parent / "pyproject.toml"


def main() -> None:
    project = tomllib.loads(PYPROJECT.read_text("utf-8"))["project"]
    print("\n".join(project["dependencies"] + project["optional-dependencies"]["test"]))


if __name__ == "__main__":
    main()
