"""The status page: `provision status --html` (page.py) and its vendored chart library (vendor/)."""
