"""The label, annotation and value names gpualign reads and writes, in one place."""

GPU_PRESENT = "nvidia.com/gpu.present"
PCI_NVIDIA = "feature.node.kubernetes.io/pci-10de.present"  # NFD: an NVIDIA PCI device; the operator keys on it
# NFD's labels for NVIDIA's display and 3D controllers, where it labels devices by class and vendor (the GPU
# Operator's state_manager reads these two as well)
PCI_NVIDIA_BY_CLASS = ("feature.node.kubernetes.io/pci-0300_10de.present",
                       "feature.node.kubernetes.io/pci-0302_10de.present")
KERNEL = "feature.node.kubernetes.io/kernel-version.full"
OS_ID = "feature.node.kubernetes.io/system-os_release.ID"
OS_VERSION = "feature.node.kubernetes.io/system-os_release.VERSION_ID"
OS_VERSION_MAJOR = "feature.node.kubernetes.io/system-os_release.VERSION_ID.major"
# The node's CPU architecture, as every kubelet labels it (Go's names: amd64, arm64). A node without it is taken as
# amd64, as gpualign took every node before it read the label.
ARCH = "kubernetes.io/arch"
DEFAULT_ARCH = "amd64"

# GPU Feature Discovery: current names (GFD >= v0.15) and the deprecated ones it still writes.
DRIVER_CURRENT = {"major": "nvidia.com/cuda.driver-version.major", "minor": "nvidia.com/cuda.driver-version.minor",
                  "rev": "nvidia.com/cuda.driver-version.revision"}
DRIVER_CURRENT_FULL = "nvidia.com/cuda.driver-version.full"
DRIVER_LEGACY = {"major": "nvidia.com/cuda.driver.major", "minor": "nvidia.com/cuda.driver.minor",
                 "rev": "nvidia.com/cuda.driver.rev"}
GPU_PRODUCT = "nvidia.com/gpu.product"

# The GPU Operator's driver-deploy label: "false" means the driver is installed on the host.
DEPLOY_DRIVER = "nvidia.com/gpu.deploy.driver"

UPGRADE_STATE = "nvidia.com/gpu-driver-upgrade-state"
UPGRADE_SKIP = "nvidia.com/gpu-driver-upgrade.skip"

# gpualign's gate (controller/gate.py) beside the operator's walk; status and why read them too.
# The kernel a node will boot next, published by the node (an NFD local feature file written by a hook that runs
# after the package manager stages a kernel; docs/controller.md shows one): the controller ensures its image ahead.
KERNEL_NEXT = "gpualign.io/kernel.next"
# The OS a node moves to next (a pool migration: debian-13, ubuntu-24.04; ID and VERSION_ID as os-release has them),
# set with its kernel.next: the controller ensures the image of both ahead, as `gpualign plan --os --kernel` lists it.
OS_NEXT = "gpualign.io/os.next"
GATED = "gpualign.io/upgrade-gated"  # the gate's own mark: the skip label on this node is gpualign's
GATED_SINCE = "gpualign.io/upgrade-gated-since"  # when the gate took the node (RFC 3339)
HELD_WARNED = "gpualign.io/upgrade-gated-warned"  # the held-too-long warning was given for this hold
# The gate holds every node the operator walks until it has judged the node's turn (fail closed): ARMED marks a skip
# label the gate set on a node no upgrade is asked of yet; RELEASED marks a node it let into the operator's walk.
ARMED = "gpualign.io/upgrade-armed"
GATED_KIND = "gpualign.io/upgrade-gated-kind"  # what holds it: image, pdb, unmovable, other
GATED_PDB = "gpualign.io/upgrade-gated-pdb"  # the PodDisruptionBudget that holds it (namespace/name)
RELEASED = "gpualign.io/upgrade-released"

# Driver pods, as the GPU Operator labels them.
DRIVER_COMPONENT = "app.kubernetes.io/component"
DRIVER_COMPONENT_VALUE = "nvidia-driver"
PRECOMPILED = "nvidia.com/precompiled"

# Secure Boot on the node (its kernel loads only modules signed by an enrolled key). No standard label exists: a fleet
# publishes it as NFD publishes local features (a feature file from `mokutil --sb-state`); the lab sets it.
SECURE_BOOT = "gpualign.io/secure-boot"  # "enabled"
