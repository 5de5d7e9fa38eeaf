"""The offline bundle: what an inventory's hosts need, gathered on a connected machine
(`provision bundle`), and used by `provision up --bundle` on hosts with no internet.

`needs` says what one host needs (apt packages of its OS release, the vLLM image, the weights) from
the same tasks and variables `up` runs; `manifest` is the bundle's index; `build` makes a bundle;
`offline` checks a bundle against the hosts and hands it to the roles (roles/offline_bundle).
"""
