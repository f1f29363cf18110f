"""A ResourceSlice as NVIDIA's DRA driver's kubelet plugin writes one (k8s-dra-driver-gpu,
cmd/gpu-kubelet-plugin/deviceinfo.go: driver `gpu.nvidia.com`, one device per GPU, semver attributes)."""

from __future__ import annotations

SLICE = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": "dra-1-gpu.nvidia.com-x"},
         "spec": {"driver": "gpu.nvidia.com", "nodeName": "dra-1", "pool": {"name": "dra-1", "generation": 1,
                                                                            "resourceSliceCount": 1},
                  "devices": [{"name": "gpu-0", "attributes": {
                      "type": {"string": "gpu"}, "productName": {"string": "NVIDIA H100 80GB HBM3"},
                      "driverVersion": {"version": "550.163.1"}, "cudaDriverVersion": {"version": "12.4.0"}}},
                      {"name": "gpu-1", "attributes": {
                          "type": {"string": "gpu"}, "driverVersion": {"version": "580.65.6"},
                          "cudaDriverVersion": {"version": "13.0.0"}}}]}}
