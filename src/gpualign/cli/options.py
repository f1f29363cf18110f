"""The options several commands share, named and documented once. Metavars are kubectl's style: what the value is
(FILE, SOURCE, SELECTOR), never a Python type."""

from __future__ import annotations

import enum
import functools
from pathlib import Path
from typing import Annotated, Any

import typer

from gpualign.cli import complete


class Output(enum.StrEnum):
    table = "table"
    wide = "wide"
    json = "json"
    yaml = "yaml"


OutputOpt = Annotated[Output, typer.Option(
    "--output", "-o", metavar="FORMAT",
    help="table, wide (every column, and the long reasons), json or yaml (a versioned document)")]
KubeconfigOpt = Annotated[str | None, typer.Option(
    "--kubeconfig", metavar="FILE",
    help="kubeconfig file to use [default: the files in $KUBECONFIG, merged as kubectl merges them, else "
         "~/.kube/config, else the in-cluster service account]")]
ContextOpt = Annotated[str | None, typer.Option(
    "--context", metavar="NAME", autocompletion=complete.contexts,
    help="kubeconfig context to use, from any file of $KUBECONFIG [default: the current-context]")]
SelectorOpt = Annotated[str | None, typer.Option(
    "--selector", "-l", metavar="SELECTOR",
    help="label selector on GPU nodes, as kubectl takes it: pool=train, 'pool in (a,b)', !spot")]
NodesFileOpt = Annotated[Path | None, typer.Option(
    "--nodes-file", metavar="FILE",
    help="read nodes from a `kubectl get nodes -o json|yaml` dump (- for stdin) instead of a cluster")]
LedgerOpt = Annotated[list[str] | None, typer.Option(
    "--ledger", metavar="SOURCE",
    help="where the team's driver images are listed (repeatable, merged): a text file (one tag or image per line, "
         "# comments), a YAML/JSON list, - for stdin, or registry://HOST[:PORT]/REPO")]
BranchOpt = Annotated[str | None, typer.Option(
    "--driver-branch", metavar="BRANCH",
    help="driver branch for every node, e.g. 580 [default: the branch each node's driver pod is deployed with, "
         "else the loaded driver's]")]
BranchPolicyOpt = Annotated[Path | None, typer.Option(
    "--branch-policy", metavar="FILE",
    help="YAML file mapping node selectors to branches (pools: [{selector, branch, usePrecompiled, "
         "kernelModuleType}]); first match wins")]
KernelModuleTypeOpt = Annotated[str | None, typer.Option(
    "--kernel-module-type", metavar="TYPE", autocompletion=complete.module_types,
    help="the kernel modules the driver pods load, as the GPU Operator's kernelModuleType says it: auto (open from "
         "branch 560, proprietary before), open or proprietary [default: each pool's kernelModuleType in the GPU "
         "Operator's objects, else auto]")]
OldPolicyOpt = Annotated[Path | None, typer.Option(
    "--policy", metavar="FILE", hidden=True, help="deprecated spelling of --branch-policy")]
RulesOpt = Annotated[Path | None, typer.Option(
    "--rules", metavar="FILE",
    help="override sections of the built-in naming rules (print them with `gpualign rules`); a section given "
         "replaces that section")]
RepositoryOpt = Annotated[str | None, typer.Option(
    "--repository", metavar="REPO",
    help="image repository for full references [default: the registry ledger's, else nvcr.io/nvidia/driver]")]
DockerConfigOpt = Annotated[Path | None, typer.Option(
    "--docker-config", metavar="FILE",
    help="docker config.json with registry credentials [default: $DOCKER_CONFIG/config.json, else "
         "~/.docker/config.json]")]
OperatorVersionOpt = Annotated[str | None, typer.Option(
    "--operator-version", metavar="VERSION",
    help="name OS tags as this GPU Operator version does, e.g. v25.10.1 (RHEL keeps its full VERSION_ID before "
         "v26.3.0) [default: the version on the cluster's ClusterPolicy (label app.kubernetes.io/version), else "
         "the newest rules]")]
NoHeadersOpt = Annotated[bool, typer.Option("--no-headers", help="print tables without their header line")]
def _allow_insecure(hosts: list[str] | None) -> list[str] | None:
    if hosts:
        from gpualign.ledger.references import allow_insecure

        allow_insecure(hosts)
    return hosts


InsecureRegistryOpt = Annotated[list[str] | None, typer.Option(
    "--insecure-registry", metavar="HOST[:PORT]", callback=_allow_insecure,
    help="speak plain http to this registry although it is not on this machine (repeatable); without it, http:// "
         "to a remote registry is refused")]


def _trust(keys: list[str] | None) -> list[str] | None:
    """The keys named are loaded now (a bad one is bad input, in one line, before any work), and the run's report
    names them ($GPUALIGN_TRUSTED_KEYS, which gpualign.cli.common reads)."""
    if keys:
        import os

        from gpualign.model.cosign import TRUSTED_ENV

        paths = _key_paths(keys)
        trusted_keys(keys)
        os.environ[TRUSTED_ENV] = os.pathsep.join(paths)
    return keys


def _key_paths(keys: list[str]) -> tuple[str, ...]:
    import os

    return tuple(p for k in keys for p in k.split(os.pathsep) if p)


def trusted_keys(keys: list[str] | None) -> tuple[Any, ...]:
    """The keys --trusted-key (or $GPUALIGN_TRUSTED_KEYS) names, loaded: what the command hands on to judge images
    and shared artifacts by; none: signatures are not checked."""
    return _loaded(_key_paths(keys)) if keys else ()


@functools.cache
def _loaded(paths: tuple[str, ...]) -> tuple[Any, ...]:
    from gpualign.judging.signature_check import load_trusted  # cryptography: only where keys are named

    return load_trusted(paths)


TrustedKeyOpt = Annotated[list[str] | None, typer.Option(
    "--trusted-key", metavar="PUB", envvar="GPUALIGN_TRUSTED_KEYS", callback=_trust,
    help="a public key (PEM, as `cosign generate-key-pair` writes cosign.pub) every driver image must be signed by, "
         "over its digest, as cosign signs; repeatable (env: ':'-separated). An image without such a signature is "
         "present but unsigned: never present [default: signatures not checked]")]

SignKeyOpt = Annotated[Path | None, typer.Option(
    "--sign-key", metavar="FILE", help="sign every module of the images built for Secure Boot with this private key "
                                       "(PEM, unencrypted); needs --sign-cert")]
SignCertOpt = Annotated[Path | None, typer.Option(
    "--sign-cert", metavar="FILE", help="the signing key's X.509 certificate (PEM or DER): the one enrolled on the "
                                        "nodes (MOK or the platform keyring)")]
SignSecretOpt = Annotated[str | None, typer.Option(
    "--sign-secret", metavar="NAMESPACE/NAME",
    help="read the signing key and certificate from this Secret on the cluster instead of files")]
