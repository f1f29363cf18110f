"""The lab: a real control plane (etcd, kube-apiserver, controller-manager, scheduler) with kwok GPU nodes.

Nothing in the core imports this package.
"""
