"""The stand-in packages of the NVIDIA Container Toolkit repository, with the real names.

The four packages and their real inter-package dependencies (NVIDIA's debian/control):
`nvidia-container-toolkit` = toolkit-base exactly and libnvidia-container-tools (>= V, << 2.0.0);
`libnvidia-container-tools` >= libnvidia-container1 V. Only the first is exact, which is why a user
pins all four together: `apt-get install nvidia-container-toolkit=V` alone takes the newest tools.
The Python stand-ins depend on python3 (the real binaries are Go and C; every lab host has python3).
"""

from __future__ import annotations

from . import catalogue
from .debs import DebSpec, PackageFile, PackageLink
from .gpu import RTX_5090_LAPTOP
from .payload import render

STANDIN_NOTE = "\n Stand-in of the provision test lab: scripts that simulate the real package."
LIBRARY_DIR = "/usr/lib/x86_64-linux-gnu/nvidia-standin"


def container_toolkit_packages(version: str) -> list[DebSpec]:
    """The four packages of one container toolkit release."""
    upstream = version.split("-")[0]
    commit = catalogue.CONTAINER_TOOLKIT_COMMITS[version]
    cuda_version = catalogue.cuda_version_of(catalogue.DRIVER_VERSIONS[-1])
    values = {"VERSION": upstream, "COMMIT": commit}
    base_postinst = (
        'if [ "$1" = configure ]; then\n'
        "    /usr/bin/nvidia-ctk --quiet config --config-file=/etc/nvidia-container-runtime/config.toml --in-place\n"
        "fi\n"
    )
    return [
        DebSpec("libnvidia-container1", version, "NVIDIA container runtime library" + STANDIN_NOTE,
                section="libs", extra_fields={"Multi-Arch": "same"},
                files=(PackageFile(f"{LIBRARY_DIR}/libnvidia-container.so.{upstream}",
                                   f"{upstream}\nlibnvidia-container stand-in version marker\n".encode()),),
                links=(PackageLink(f"{LIBRARY_DIR}/libnvidia-container.so.1", f"libnvidia-container.so.{upstream}"),)),
        DebSpec("libnvidia-container-tools", version,
                "NVIDIA container runtime library (command-line tools)" + STANDIN_NOTE,
                section="utils", depends=(f"libnvidia-container1 (>= {version})", "python3"),
                files=(PackageFile("/usr/bin/nvidia-container-cli",
                                   render("nvidia-container-cli", **values, CUDA_VERSION=cuda_version,
                                          DEFAULT_PROFILE=RTX_5090_LAPTOP.to_json()), 0o755),)),
        DebSpec("nvidia-container-toolkit-base", version, "NVIDIA Container Toolkit Base" + STANDIN_NOTE,
                section="utils", depends=("python3",),
                files=(PackageFile("/usr/bin/nvidia-ctk", render("nvidia-ctk", **values), 0o755),
                       PackageFile("/usr/bin/nvidia-container-runtime",
                                   render("nvidia-container-runtime", **values), 0o755)),
                scripts={"postinst": base_postinst}),
        DebSpec("nvidia-container-toolkit", version, "NVIDIA Container toolkit" + STANDIN_NOTE,
                section="utils",
                depends=(f"nvidia-container-toolkit-base (= {version})",
                         f"libnvidia-container-tools (>= {version})", "libnvidia-container-tools (<< 2.0.0)",
                         "libseccomp2", "python3"),
                files=(PackageFile("/usr/bin/nvidia-container-runtime-hook",
                                   render("nvidia-container-runtime-hook"), 0o755),)),
    ]


def container_repo_packages() -> list[DebSpec]:
    """Every package of the container toolkit repository, all releases."""
    specs: list[DebSpec] = []
    for version in catalogue.CONTAINER_TOOLKIT_VERSIONS:
        specs += container_toolkit_packages(version)
    return specs
