"""Which kernel modules a node's driver pod loads: NVIDIA's proprietary ones or its open ones. Pure.

The GPU Operator reads `kernelModuleType` (ClusterPolicy `spec.driver`, NVIDIADriver `spec`: auto, open or
proprietary; its CRD defaults it to auto) and hands it to the driver container as `KERNEL_MODULE_TYPE` (and
`OPEN_KERNEL_MODULES_ENABLED=true` for open, for older containers). The driver container decides `auto`: NVIDIA's
asks its installer for a recommendation, and without one takes the branch: below 560 proprietary, from 560 open.
gpualign's images have no installer to ask, so `auto` is that rule, and it is the same in check, ensure and the
image's own `nvidia-driver init`.
"""

from __future__ import annotations

from enum import StrEnum


class Flavour(StrEnum):
    """The kernel modules an image holds and a driver pod loads."""

    PROPRIETARY = "proprietary"
    OPEN = "open"


class ModuleType(StrEnum):
    """What the operator's kernelModuleType asks for: a flavour, or `auto` (the branch decides)."""

    AUTO = "auto"
    OPEN = "open"
    PROPRIETARY = "proprietary"


PROPRIETARY, OPEN, AUTO = Flavour.PROPRIETARY, Flavour.OPEN, ModuleType.AUTO
FLAVOURS = tuple(Flavour)
MODULE_TYPES = tuple(ModuleType)
OPEN_BY_DEFAULT_FROM = 560  # the first branch whose `auto` means open modules
LABEL = "io.gpualign.kernel-module-type"  # the image's: the flavour of the modules it holds


def resolve(module_type: str | None, branch: str | None) -> str:
    """The flavour a driver pod of `branch` loads when the operator asks for `module_type` (None: auto)."""
    if module_type in FLAVOURS:
        return str(module_type)
    return OPEN if branch and branch.isdigit() and int(branch) >= OPEN_BY_DEFAULT_FROM else PROPRIETARY


def explain(module_type: str | None, branch: str | None) -> str:
    """Why a node gets the flavour it gets, in a few words: `open (kernelModuleType: open)`,
    `proprietary (kernelModuleType: auto, branch 550 < 560)`."""
    flavour = resolve(module_type, branch)
    if module_type in FLAVOURS:
        return f"{flavour} (kernelModuleType: {module_type})"
    if branch and branch.isdigit():
        sign = "<" if flavour == PROPRIETARY else ">="
        return f"{flavour} (kernelModuleType: auto, branch {branch} {sign} {OPEN_BY_DEFAULT_FROM})"
    return f"{flavour} (kernelModuleType: auto)"


def mismatch(held: str | None, module_type: str | None, branch: str | None, cannot_build: str | None = None) \
        -> str | None:
    """Why an image holding `held` modules (its label; None: unlabelled, nothing to compare) is wrong for a pod that
    asks for `module_type`, or None. cannot_build: why gpualign cannot build the wanted flavour (said instead of how
    to build it)."""
    if held is None or held not in FLAVOURS:
        return None
    wanted = resolve(module_type, branch)
    if held == wanted:
        return None
    advice = cannot_build or (f"build it with gpualign ensure --flavour {wanted}, or set kernelModuleType: "
                              f"{held}")
    return (f"it holds {held} kernel modules, and the GPU Operator's pod here loads {explain(module_type, branch)}: "
            f"nvidia-driver init refuses it ({advice})")


def asked_by(env: dict[str, str]) -> str | None:
    """The module type a driver container's environment asks for, as the container reads it: KERNEL_MODULE_TYPE,
    else an older operator's OPEN_KERNEL_MODULES_ENABLED=true (open), else auto (None)."""
    value = env.get("KERNEL_MODULE_TYPE")
    if value:
        return value
    return OPEN if env.get("OPEN_KERNEL_MODULES_ENABLED") == "true" else None


def init_refusal(held: str | None, env: dict[str, str], branch: str, kernel: str) -> str | None:
    """What gpualign's `nvidia-driver init` (ensure/nvidia-driver.sh) says when an image holding `held` modules is
    started with `env` (None: it goes on). The lab's driver simulator says the same."""
    if not held:
        return None
    asked = asked_by(env)
    if asked is not None and asked not in MODULE_TYPES:
        return f"nvidia-driver: invalid value for the KERNEL_MODULE_TYPE variable: {asked}"
    wanted = resolve(asked, branch)
    if wanted == held:
        return None
    return (f"gpualign: driver image {branch}-{kernel} holds NVIDIA's {held} kernel modules; this pod asks for "
            f"{wanted} (KERNEL_MODULE_TYPE={env.get('KERNEL_MODULE_TYPE') or 'auto'}): refusing to load (build it "
            f"with gpualign ensure --flavour {wanted}, or set the operator's kernelModuleType: {held})")
