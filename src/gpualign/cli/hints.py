"""A refusal worded at the edge: lower rooms raise typed refusals that say what is wrong; the command line adds which
of its flags would set it right. Every error that ends a command passes through `worded`; what it does not know is
said as raised."""

from __future__ import annotations

from gpualign.base.errors import GpualignError


def worded(err: GpualignError) -> str:
    if err.final:
        return err.message
    from gpualign.ensure.refusals import NoKernelVM, NoModulesGiven, UpstreamUnreachable
    from gpualign.judging.refusals import NotBuiltHere
    from gpualign.kube.kubeconfig import NoCurrentContext, NoKubeconfig
    from gpualign.usecases.kernel_load import NoKernelNamed
    from gpualign.usecases.refusals import (
        CheckNoLedger,
        DumpOrCluster,
        NotARegistry,
        PlanNoLedger,
        RepositoriesToChoose,
    )

    match err:
        case NoKernelVM():
            return f"{err.message}, or pass --no-kernel-load to build without it (the report then says so)"
        case NoKernelNamed():
            return f"{err.ref}: its tag names no kernel (BRANCH-KERNEL-OS): pass --kernel RELEASE"
        case NoKubeconfig(context=str(context)):
            return (f"--context {context}: no kubeconfig to read it from (no --kubeconfig, $KUBECONFIG or "
                    "~/.kube/config)")
        case NoKubeconfig():
            return ("no kubeconfig: pass --kubeconfig FILE or set $KUBECONFIG (there is no ~/.kube/config, and this "
                    "is not a pod with a service account)")
        case NoCurrentContext():
            return f"kubeconfig {err.where}: no current-context is set: pass --context NAME (known: {err.known})"
        case DumpOrCluster():
            return "--nodes-file reads a dump, --kubeconfig/--context a cluster: pass one of them"
        case CheckNoLedger():
            return ("no ledger: pass --ledger FILE or --ledger registry://HOST/REPO (repeatable); without one, check "
                    "needs the GPU Operator's ClusterPolicy to name the repository, and found none")
        case PlanNoLedger():
            return ("no ledger: pass --ledger FILE or --ledger registry://HOST/REPO (repeatable); no GPU Operator "
                    "objects here name the repository")
        case RepositoriesToChoose():
            return f"{err.message}: pass --ledger and --repository for the one to plan"
        case NoModulesGiven():
            return f"--modules-from {err.directory}: no .ko file there"
        case UpstreamUnreachable():
            return (f"{err.why} (asking the upstream for {err.tag}: pass --upstream REGISTRY to mirror from a "
                    "registry you can reach, or --upstream none to build without asking)")
        case NotBuiltHere():
            return (f"{err.tag}: {err.os_tag} images are not built by gpualign: render the recipe with `gpualign "
                    "ensure --render DIR` and build it where the distribution's archive is reachable (or mirror "
                    "NVIDIA's published image with --upstream)")
        case NotARegistry():
            return f"--ledger {err.ledger}: expected registry://HOST[:PORT]/REPO (a file ledger holds no images)"
    return err.message


def settled(err: GpualignError, more: str = "") -> GpualignError:
    """The error with its words fixed as the command line says them, `more` added: said once, as is."""
    err.message, err.final = worded(err) + more, True
    return err
