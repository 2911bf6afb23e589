"""One analysis from request to report: analyze(), models by name, the device it plans for, the report's assembly."""
