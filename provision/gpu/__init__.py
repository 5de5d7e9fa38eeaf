"""The NVIDIA GPU and its driver as host facts: the probe sections (`probe.sh`, registered in
`facts.py`), their parsers (`parse.py`) and value types (`model.py`), beside the roles that read
them (nvidia_driver, preflight, plan). The facts engine knows this package only as an entry of
`provision/facts/sections.py` `SECTION_MODULES`."""
