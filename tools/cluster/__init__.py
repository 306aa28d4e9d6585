"""make deploy / undeploy / verify-cluster: inferline on a Kubernetes cluster, through kubectl.

    python -m tools.cluster deploy --overlay gpu --registry REG --tag TAG   # render, kubectl apply
    python -m tools.cluster deploy --overlay cpu --registry REG --tag TAG --dry-run   # print it
    python -m tools.cluster undeploy --overlay gpu
    python -m tools.cluster verify
    python -m tools.cluster deploy --overlay gpu --namespace team-a …   # or any namespace

``deploy`` writes a kustomization of its own under ``build/deploy/<overlay>/`` that points at
``k8s/overlays/<overlay>`` and sets every image to ``<registry>/inferline-<name>:<tag>``, then
applies ``kubectl kustomize`` of it. In another namespace than ``inferline`` (``--namespace``,
`make deploy NAMESPACE=…`) it is the two layers of k8s/README.md's "Another namespace": one with
``namespace:`` over the overlay's ``pipeline/``, and the overlay's own components (one per
cluster, with objects in other namespaces) above it. Every command takes the same namespace.

``verify`` proves the deployment end to end, in any placement: every Deployment of the overlay
rolled out (the pipeline's first; a preprocess pool only where the placement has one); Envoy's
``triton`` cluster (its admin API, through a port-forward: the admin listens on the pod's
loopback only) holds exactly the Triton pods (in-pod: each pod's preprocess, its front door);
the demo client through the cluster's Envoy with no error; Triton scaled 1 → 2 and the new pod
taking requests, then scaled back (the HPA's floor as it was: the next deploy applies cleanly).
``deploy`` applies server-side under its own field manager, forcing conflicts: what was changed
by hand since is set back to the manifests, as ``kubectl apply`` would. Each step says what it
checks and how long it took; the first failure stops it with what was seen.

Modules: :mod:`.kube` (kubectl, the namespace, the failure and the step messages),
:mod:`.kustomize` (the deploy-time kustomization and its render), one per command
(:mod:`.deploy`, :mod:`.undeploy`, :mod:`.verify`) and :mod:`.__main__` (the command line).
"""
