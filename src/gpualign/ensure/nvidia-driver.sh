#!/bin/sh
# nvidia-driver: the GPU Operator's precompiled driver container contract, for an image gpualign built.
#
# Commands, environment, files and signals as in NVIDIA's own precompiled script (gpu-driver-container,
# ubuntu22.04/precompiled/nvidia-driver): `init` takes a lock on /run/nvidia/nvidia-driver.pid, unloads old
# modules, loads nvidia, nvidia-uvm and nvidia-modeset (and nvidia-peermem with GPU_DIRECT_RDMA_ENABLED=true and a
# Mellanox device) with the parameters in /drivers/<module>.conf, starts nvidia-persistenced, runs nvidia-smi,
# bind-mounts / at /run/nvidia/driver and waits; on a signal it unloads and unmounts. `reload_nvidia_peermem` and
# `probe_nvidia_peermem` serve the operator's peermem side container.
#
# Two additions, gpualign's: the modules were built and verified for one kernel, and are of one flavour (proprietary
# or open), so `init` refuses, in one line and before touching anything already loaded, to run on any other kernel
# (NVIDIA's script never compares them) or for a pod that asks for the other flavour (KERNEL_MODULE_TYPE).
set -eu

KERNEL_VERSION=$(uname -r)
RUN_DIR=/run/nvidia
PID_FILE=${RUN_DIR}/nvidia-driver.pid
GPU_DIRECT_RDMA_ENABLED="${GPU_DIRECT_RDMA_ENABLED:-false}"
USE_HOST_MOFED="${USE_HOST_MOFED:-false}"

_require_branch() {
    if [ -z "${DRIVER_BRANCH:-}" ]; then
        echo "nvidia-driver: DRIVER_BRANCH: Missing driver version" >&2
        exit 1
    fi
}

# Parameters for one module, from /drivers/<module>.conf: every line, parameters space-separated (NVIDIA's format).
_module_params() {
    if [ -f "/drivers/$1.conf" ]; then
        params=$(tr '\n' ' ' < "/drivers/$1.conf")
        echo "Module parameters provided for $1: ${params}" >&2
        echo "${params}"
    fi
}

_mellanox_devices_present() {
    for dev in /sys/bus/pci/devices/*; do
        [ -r "$dev/vendor" ] || continue
        if [ "$(cat "$dev/vendor")" = "0x15b3" ]; then
            echo "Mellanox device found at ${dev##*/}"
            return 0
        fi
    done
    echo "No Mellanox devices were found..."
    return 1
}

_gpu_direct_rdma_enabled() {
    [ "${GPU_DIRECT_RDMA_ENABLED}" = "true" ] && _mellanox_devices_present
}

_check_kernel() {
    want="${GPUALIGN_KERNEL:?this image does not name its kernel (GPUALIGN_KERNEL)}"
    if [ "${KERNEL_VERSION}" != "${want}" ]; then
        echo "gpualign: driver image ${DRIVER_BRANCH}-${want} holds NVIDIA ${DRIVER_VERSION:-?} modules built and" \
             "verified for kernel ${want}; this node runs ${KERNEL_VERSION}: refusing to load (the kernel would" \
             "refuse them: version magic and symbol CRCs differ)" >&2
        exit 1
    fi
}

# The flavour of modules the pod asks for: KERNEL_MODULE_TYPE (auto, open, proprietary; the GPU Operator's
# kernelModuleType), or OPEN_KERNEL_MODULES_ENABLED=true from an older operator. `auto` is decided as NVIDIA's
# container decides it without its installer's advice: branch 560 and later open, earlier proprietary.
_wanted_flavour() {
    case "${KERNEL_MODULE_TYPE:-}" in
        open|proprietary) echo "${KERNEL_MODULE_TYPE}"; return 0 ;;
        ""|auto) ;;
        *) echo "nvidia-driver: invalid value for the KERNEL_MODULE_TYPE variable: ${KERNEL_MODULE_TYPE}" >&2
           return 1 ;;
    esac
    if [ -z "${KERNEL_MODULE_TYPE:-}" ] && [ "${OPEN_KERNEL_MODULES_ENABLED:-}" = "true" ]; then
        echo open
    elif [ "${DRIVER_BRANCH}" -ge 560 ] 2>/dev/null; then
        echo open
    else
        echo proprietary
    fi
}

_check_flavour() {
    held="${GPUALIGN_KERNEL_MODULE_TYPE:-}"
    [ -n "${held}" ] || return 0  # an image from before gpualign labelled its flavour: nothing to compare
    wanted=$(_wanted_flavour) || exit 1
    if [ "${wanted}" != "${held}" ]; then
        echo "gpualign: driver image ${DRIVER_BRANCH}-${GPUALIGN_KERNEL:-?} holds NVIDIA's ${held} kernel modules;" \
             "this pod asks for ${wanted} (KERNEL_MODULE_TYPE=${KERNEL_MODULE_TYPE:-auto}): refusing to load (build" \
             "it with gpualign ensure --flavour ${wanted}, or set the operator's kernelModuleType: ${held})" >&2
        exit 1
    fi
}

_load_driver() {
    echo "Loading ipmi and i2c_core kernel modules..."
    modprobe -a i2c_core ipmi_msghandler ipmi_devintf || true
    echo "Loading NVIDIA driver kernel modules..."
    # shellcheck disable=SC2046 # the parameters are words, as NVIDIA's script passes them
    modprobe nvidia $(_module_params nvidia)
    # shellcheck disable=SC2046
    modprobe nvidia-uvm $(_module_params nvidia-uvm)
    # shellcheck disable=SC2046
    modprobe nvidia-modeset $(_module_params nvidia-modeset)
    if _gpu_direct_rdma_enabled; then
        echo "Loading NVIDIA Peer Memory kernel module..."
        # shellcheck disable=SC2046
        modprobe nvidia-peermem $(_module_params nvidia-peermem)
    fi
    echo "Starting NVIDIA persistence daemon..."
    nvidia-persistenced --persistence-mode
    nvidia-smi
}

_stop_pidfile() {
    if [ -f "$1" ]; then
        pid=$(cat "$1")
        kill -TERM "${pid}" 2>/dev/null || true
        i=0
        while kill -0 "${pid}" 2>/dev/null; do
            i=$((i + 1))
            if [ "$i" -ge 50 ]; then
                echo "Could not stop $2" >&2
                return 1
            fi
            sleep 0.1
        done
    fi
}

_unload_driver() {
    echo "Stopping NVIDIA persistence daemon..."
    _stop_pidfile /var/run/nvidia-persistenced/nvidia-persistenced.pid "NVIDIA persistence daemon" || return 1
    echo "Unloading NVIDIA driver kernel modules..."
    modules="" deps=0 refs=0
    for m in nvidia_drm nvidia_modeset nvidia_uvm nvidia_peermem; do
        if [ -f "/sys/module/$m/refcnt" ]; then
            modules="${modules} $m"
            deps=$((deps + 1))
        fi
    done
    if [ -f /sys/module/nvidia/refcnt ]; then
        refs=$(cat /sys/module/nvidia/refcnt)
        modules="${modules} nvidia"
    fi
    if [ "${refs}" -gt "${deps}" ]; then
        lsmod | grep nvidia || true
        echo "Could not unload NVIDIA driver kernel modules, driver is in use" >&2
        return 1
    fi
    if [ -n "${modules}" ]; then
        # shellcheck disable=SC2086 # one word per module
        rmmod ${modules}
    fi
    return 0
}

_mount_rootfs() {
    echo "Mounting NVIDIA driver rootfs..."
    mount --make-runbindable /sys
    mount --make-private /sys
    mkdir -p "${RUN_DIR}/driver"
    mount --rbind / "${RUN_DIR}/driver"
}

_unmount_rootfs() {
    if findmnt -r -o TARGET | grep -q "${RUN_DIR}/driver"; then
        echo "Unmounting NVIDIA driver rootfs..."
        umount -l -R "${RUN_DIR}/driver"
    fi
}

_shutdown() {
    if _unload_driver; then
        _unmount_rootfs
        rm -f "${PID_FILE}"
        return 0
    fi
    return 1
}

init() {
    _require_branch
    printf '\n========== NVIDIA Software Installer ==========\n\n'
    printf 'Starting installation of NVIDIA driver branch %s for Linux kernel version %s\n\n' "${DRIVER_BRANCH}" \
        "${KERNEL_VERSION}"
    mkdir -p "${RUN_DIR}"
    exec 3> "${PID_FILE}"
    if ! flock -n 3; then
        echo "An instance of the NVIDIA driver is already running, aborting"
        exit 1
    fi
    echo $$ >&3
    _check_flavour
    _check_kernel
    trap "echo 'Caught signal'; exit 1" HUP INT QUIT PIPE TERM
    trap "_shutdown" EXIT
    _unload_driver || exit 1
    _unmount_rootfs
    echo "Using the precompiled NVIDIA ${DRIVER_VERSION:-} modules in this image for ${KERNEL_VERSION}"
    _load_driver || exit 1
    _mount_rootfs
    echo "Done, now waiting for signal"
    sleep infinity &
    trap "echo 'Caught signal'; _shutdown && { kill \$!; exit 0; }" HUP INT QUIT PIPE TERM
    trap - EXIT
    while true; do wait $! || continue; done
}

reload_nvidia_peermem() {
    if [ "${USE_HOST_MOFED}" = "true" ]; then
        until lsmod | grep -q mlx5_core && [ -f /sys/module/nvidia/refcnt ]; do
            echo "waiting for mellanox ofed and nvidia drivers to be installed"
            sleep 10
        done
    else
        until [ -f /run/mellanox/drivers/.driver-ready ] && [ -f /sys/module/nvidia/refcnt ]; do
            echo "waiting for mellanox ofed and nvidia drivers to be installed"
            sleep 10
        done
    fi
    # shellcheck disable=SC2046
    if chroot /run/nvidia/driver modprobe nvidia-peermem $(_module_params nvidia-peermem); then
        if [ -f /sys/module/nvidia_peermem/refcnt ]; then
            echo "successfully loaded nvidia-peermem module, now waiting for signal"
            trap "echo 'Caught signal'; exit 1" HUP INT QUIT PIPE TERM
            sleep infinity
        fi
    fi
    echo "failed to load nvidia-peermem module"
    exit 1
}

probe_nvidia_peermem() {
    if lsmod | grep -q mlx5_core; then
        if [ ! -f /sys/module/nvidia_peermem/refcnt ]; then
            echo "nvidia-peermem module is not loaded"
            return 1
        fi
    else
        echo "MOFED drivers are not ready, skipping probe to avoid container restarts..."
    fi
    return 0
}

usage() {
    cat >&2 <<EOF
Usage: $0 COMMAND [ARG...]

Commands:
  init   [-a | --accept-license]
  reload_nvidia_peermem
  probe_nvidia_peermem
EOF
    exit 1
}

[ $# -gt 0 ] || usage
command=$1
shift
case "${command}" in
    init)
        for arg in "$@"; do
            case "${arg}" in -a|--accept-license) ;; *) usage ;; esac
        done
        init ;;
    reload_nvidia_peermem) reload_nvidia_peermem ;;
    probe_nvidia_peermem) probe_nvidia_peermem ;;
    *) usage ;;
esac
