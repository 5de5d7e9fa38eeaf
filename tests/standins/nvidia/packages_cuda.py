"""The stand-in packages of NVIDIA's CUDA repository (driver, toolkit, keyring), with the real names.

Per driver version: `nvidia-open` (meta), `nvidia-driver-cuda` (compute-only userspace),
`nvidia-smi`, `libnvidia-ml1`, `nvidia-persistenced`, `nvidia-kernel-open-dkms` (open module),
`nvidia-kernel-dkms` (proprietary module: present so a test can prove it is not installed) and
`cuda-drivers` (pulls the proprietary module: never to be installed on Blackwell). Once:
`cuda-toolkit-12-9`, `cuda-12-9` and `cuda` (the last two pull `cuda-drivers`), and `cuda-keyring`.

Dependencies are exact-version (`= V`) between the driver packages as in NVIDIA's repo, so holding
the top-level packages holds the set. The module packages depend on `kmod` only: the real ones need
dkms and the headers of the running kernel, which the lab (sharing this machine's kernel) lacks.
With `dkms=True` (build_repo(..., dkms=True)) nvidia-kernel-open-dkms is a real DKMS source package
instead: the real dkms builds it for each kernel with headers (the stand-in kernels of
tests/standins/debian) and the loader loads the booted kernel's build (DKMS_BOOTED).
"""

from __future__ import annotations

from . import catalogue
from .debs import DebSpec, PackageFile, PackageLink
from .gpu import RTX_5090_LAPTOP
from .payload import query_gpu_fields, render

STANDIN_NOTE = "\n Stand-in of the provision test lab: scripts that simulate the real package."
NVML_DIR = "/usr/lib/x86_64-linux-gnu/nvidia-standin"
# written at boot by the lab's stand-in boot loader (tests/lab/laptop.py: debian_laptop)
DKMS_BOOTED = "/run/kernel-standin/booted-kernel"


def driver_packages(driver_version: str, dkms: bool = False) -> list[DebSpec]:
    """The driver packages of one driver release."""
    version = catalogue.driver_package_version(driver_version)
    cuda_version = catalogue.cuda_version_of(driver_version)
    exactly = f"(= {version})"
    smi = render("nvidia-smi", SMI_VERSION=driver_version, CUDA_VERSION=cuda_version,
                 DEFAULT_PROFILE=RTX_5090_LAPTOP.to_json().strip(),
                 VALID_FIELDS=" ".join(query_gpu_fields()))
    return [
        DebSpec("libnvidia-ml1", version, "NVIDIA Management Library (NVML) runtime library" + STANDIN_NOTE,
                files=(PackageFile(f"{NVML_DIR}/libnvidia-ml.so.{driver_version}",
                                   f"{driver_version}\nNVML stand-in library version marker\n".encode()),),
                links=(PackageLink(f"{NVML_DIR}/libnvidia-ml.so.1", f"libnvidia-ml.so.{driver_version}"),)),
        DebSpec("nvidia-smi", version, "NVIDIA System Management Interface" + STANDIN_NOTE,
                depends=(f"libnvidia-ml1 {exactly}",),
                files=(PackageFile("/usr/bin/nvidia-smi", smi, 0o755),)),
        DebSpec("nvidia-persistenced", version, "daemon to maintain persistent software state in the NVIDIA driver"
                + STANDIN_NOTE,
                files=(PackageFile("/usr/bin/nvidia-persistenced",
                                   render("nvidia-persistenced", DRIVER_VERSION=driver_version), 0o755),
                       PackageFile("/lib/systemd/system/nvidia-persistenced.service",
                                   render("nvidia-persistenced.service")))),
        DebSpec("nvidia-driver-cuda", version, "NVIDIA driver CUDA integration components" + STANDIN_NOTE,
                depends=(f"nvidia-smi {exactly}", f"libnvidia-ml1 {exactly}", f"nvidia-persistenced {exactly}",
                         f"nvidia-kernel-dkms {exactly} | nvidia-kernel-open-dkms {exactly}")),
        dkms_module_package(driver_version) if dkms else kernel_module_package(driver_version, flavour="open"),
        kernel_module_package(driver_version, flavour="proprietary"),
        DebSpec("nvidia-open", version, "NVIDIA driver metapackage (open kernel modules)" + STANDIN_NOTE,
                depends=(f"nvidia-kernel-open-dkms {exactly}", f"nvidia-driver-cuda {exactly}")),
        DebSpec("cuda-drivers", version, "CUDA Driver meta-package, branch-agnostic" + STANDIN_NOTE,
                depends=(f"nvidia-driver-cuda {exactly}", f"nvidia-kernel-dkms {exactly}")),
    ]


def kernel_module_package(driver_version: str, flavour: str) -> DebSpec:
    """nvidia-kernel-open-dkms or nvidia-kernel-dkms: the "module" and what loads it at boot."""
    version = catalogue.driver_package_version(driver_version)
    name, other = ("nvidia-kernel-open-dkms", "nvidia-kernel-dkms")
    if flavour != "open":
        name, other = other, name
    unit = "nvidia-standin-modload.service"
    postinst = (
        'if [ "$1" = configure ]; then\n'
        f'    echo "Loading new nvidia/{driver_version} DKMS files..."\n'
        '    echo "Building for $(uname -r)"\n'
        f'    echo "Building initial module nvidia/{driver_version} for $(uname -r)"\n'
        '    echo "Done."\n'
        "fi\n"
    )
    return DebSpec(
        name, version,
        f"NVIDIA binary kernel module DKMS source ({flavour} flavour)" + STANDIN_NOTE,
        depends=("kmod",),
        conflicts=(other,),
        provides=(f"nvidia-kernel-{driver_version}",),
        files=(
            PackageFile("/usr/lib/nvidia-standin/kernel-module", f"{driver_version} {flavour}\n".encode()),
            PackageFile("/usr/lib/nvidia-standin/modload", render("modload"), 0o755),
            PackageFile("/lib/modprobe.d/nvidia-standin.conf", render("modprobe-nvidia.conf")),
            PackageFile(f"/lib/systemd/system/{unit}", render(unit)),
        ),
        links=(PackageLink(f"/lib/systemd/system/sysinit.target.wants/{unit}", f"../{unit}"),),
        scripts={"postinst": postinst},
    )


def dkms_modload() -> bytes:
    """The stand-in module loader, loading what DKMS built for the booted kernel."""
    text = render("modload").decode()
    old = "INSTALLED=$ROOT/usr/lib/nvidia-standin/kernel-module"
    if old not in text:
        raise ValueError(f"tests/standins/nvidia/payload/modload changed: no {old!r}")
    new = f'INSTALLED=$ROOT/lib/modules/$(cat "$ROOT{DKMS_BOOTED}" 2>/dev/null)/updates/dkms/nvidia.ko'
    return text.replace(old, new).encode()


def dkms_module_package(driver_version: str) -> DebSpec:
    """nvidia-kernel-open-dkms as a real DKMS source package: /usr/src/nvidia-VERSION/dkms.conf, added,
    built and installed for the installed kernels by dkms's own common.postinst, removed at prerm, as
    debhelper's dh_dkms writes the scripts (debhelper autoscripts/postinst-dkms, prerm-dkms). A failed
    build fails the package's configure, as in the reports (pop-os/pop#3811: "post-installation script
    subprocess returned error exit status 10")."""
    version = catalogue.driver_package_version(driver_version)
    unit = "nvidia-standin-modload.service"
    source = f"/usr/src/nvidia-{driver_version}"
    return DebSpec(
        "nvidia-kernel-open-dkms", version,
        "NVIDIA binary kernel module DKMS source (open flavour)" + STANDIN_NOTE,
        depends=("dkms", "kmod"),
        conflicts=("nvidia-kernel-dkms",),
        provides=(f"nvidia-kernel-{driver_version}",),
        files=(
            PackageFile(f"{source}/dkms.conf", render("dkms.conf", VERSION=driver_version)),
            PackageFile(f"{source}/dkms-build.sh", render("dkms-build.sh"), 0o755),
            PackageFile("/usr/lib/nvidia-standin/modload", dkms_modload(), 0o755),
            PackageFile("/lib/modprobe.d/nvidia-standin.conf", render("modprobe-nvidia.conf")),
            PackageFile(f"/lib/systemd/system/{unit}", render(unit)),
        ),
        links=(PackageLink(f"/lib/systemd/system/sysinit.target.wants/{unit}", f"../{unit}"),),
        scripts={
            "postinst": 'if [ "$1" = configure ]; then\n'
                        f'    /usr/lib/dkms/common.postinst nvidia {driver_version} '
                        '/usr/share/nvidia-kernel-open-dkms "" "$2"\n'
                        "fi\n",
            "prerm": f"dkms remove -m nvidia -v {driver_version} --all || true\n",
        },
    )


def toolkit_packages() -> list[DebSpec]:
    """cuda-toolkit-X-Y (nvcc) and the `cuda-X-Y` / `cuda` metas that also pull the driver."""
    toolkit = catalogue.CUDA_TOOLKIT
    prefix = f"/usr/local/cuda-{toolkit.dotted}"
    nvcc = render("nvcc", CUDA_RELEASE=toolkit.dotted, NVCC_VERSION_TEXT=toolkit.nvcc_version_text)
    version_json = (
        '{\n   "cuda" : {\n      "name" : "CUDA SDK",\n'
        f'      "version" : "{toolkit.package_version.split("-")[0]}"\n   }}\n}}\n'
    ).encode()
    alternatives = (
        'if [ "$1" = configure ]; then\n'
        f"    update-alternatives --install /usr/local/cuda cuda {prefix} {toolkit.major}{toolkit.minor}\n"
        f"    update-alternatives --install /usr/local/cuda-{toolkit.major} cuda-{toolkit.major} {prefix} "
        f"{toolkit.major}{toolkit.minor}\n"
        "fi\n"
    )
    remove_alternatives = (
        'if [ "$1" = remove ]; then\n'
        f"    update-alternatives --remove cuda {prefix}\n"
        f"    update-alternatives --remove cuda-{toolkit.major} {prefix}\n"
        "fi\n"
    )
    return [
        DebSpec(f"cuda-toolkit-{toolkit.dashed}", toolkit.package_version,
                f"CUDA Toolkit {toolkit.dotted} meta-package" + STANDIN_NOTE,
                files=(PackageFile(f"{prefix}/bin/nvcc", nvcc, 0o755),
                       PackageFile(f"{prefix}/version.json", version_json)),
                scripts={"postinst": alternatives, "prerm": remove_alternatives}),
        DebSpec(f"cuda-{toolkit.dashed}", toolkit.package_version,
                f"CUDA {toolkit.dotted} meta-package (toolkit and driver)" + STANDIN_NOTE,
                depends=(f"cuda-toolkit-{toolkit.dashed} (>= {toolkit.package_version})",
                         "cuda-drivers (>= 575.51.03)")),
        DebSpec("cuda", toolkit.package_version, "CUDA meta-package" + STANDIN_NOTE,
                depends=(f"cuda-{toolkit.dashed} (>= {toolkit.package_version})",)),
    ]


def keyring_package(distro: str, repo_url: str, keyring: bytes) -> DebSpec:
    """cuda-keyring: the repository's key and its sources entry, pointing at REPO_URL."""
    keyring_path = "/usr/share/keyrings/cuda-archive-keyring.gpg"
    sources = f"deb [signed-by={keyring_path}] {repo_url} /\n"
    return DebSpec(
        "cuda-keyring", "1.1-1", "GPG keyring for the CUDA repository" + STANDIN_NOTE,
        architecture="all", section="misc",
        files=(PackageFile(keyring_path, keyring),
               PackageFile(f"/etc/apt/sources.list.d/cuda-{distro}-x86_64.list", sources.encode())),
    )


def cuda_repo_packages(dkms: bool = False) -> list[DebSpec]:
    """Every package of the CUDA repository except the keyring (which differs per distribution)."""
    specs: list[DebSpec] = []
    for driver_version in catalogue.DRIVER_VERSIONS:
        specs += driver_packages(driver_version, dkms)
    return specs + toolkit_packages()
