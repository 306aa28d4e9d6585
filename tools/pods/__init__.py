"""The rendered manifests, run as podman pods on this machine: what `make deploy` would run.

``python -m tools.pods up`` renders ``k8s/overlays/<overlay>`` exactly as ``make deploy`` does
(:func:`tools.cluster.kustomize.render`: ``kubectl kustomize`` with the images of REGISTRY and
TAG) and starts each Deployment's pod template under podman, a podman pod per replica: the
containers of a pod share its network and IPC namespaces, as in Kubernetes.

What the runner maps from a pod template (pure: :mod:`tools.pods.manifests` reads it from the
render into :mod:`tools.pods.spec`'s values, :mod:`tools.pods.environment` builds each
container's environment, :mod:`tools.pods.create` its ``podman create`` arguments):

- init containers, one after another, each to completion, then the containers;
- ``command`` and ``args`` as rendered (command replaces the image's entrypoint, args its
  command), ``$(VAR)`` expanded from the container's environment as the kubelet does;
- ``env`` (``value``; ``valueFrom`` ``fieldRef`` for the pod's name, namespace, IP, labels,
  annotations, node and service account; ``resourceFieldRef``; ``configMapKeyRef`` and
  ``secretKeyRef`` from the render) and ``envFrom``, an ``optional`` reference to what is not
  rendered left out as the kubelet leaves it;
- volumes: ``emptyDir`` (a podman volume, mode 0777 as the kubelet makes it; ``medium: Memory``
  a tmpfs of its ``sizeLimit``, e.g. the GPU pod's shared ``/dev/shm``), ``configMap`` and
  ``secret`` (files from the render, read-only; ``items``, ``defaultMode``, ``subPath``), and
  ``projected`` ones of those;
- the security context: ``runAsUser``/``runAsGroup`` (the image's user otherwise),
  ``runAsNonRoot`` (refused, as the kubelet refuses, when the user would be root or is not
  numeric), ``fsGroup``/``supplementalGroups`` as extra groups, ``readOnlyRootFilesystem``,
  capabilities, ``allowPrivilegeEscalation: false`` (no new privileges), seccomp
  (``RuntimeDefault`` is podman's default profile);
- resource limits (CPU at most this machine's cores, memory as given);
- probes (gRPC, HTTP, TCP, exec): the runner waits for startup and readiness within each
  probe's budget and reports the time to ready; ``preStop`` hooks and
  ``terminationGracePeriodSeconds`` on stop (SIGTERM, then SIGKILL when the grace runs out);
- Services: every Service whose selector matches a pod's labels is a DNS alias of the pod on
  one podman network (``<service>`` resolves to its pods, a headless Service's behaviour; no
  virtual IP, no kube-proxy).

What it plays itself, because no API server runs here: the EndpointSlice controller
(:mod:`tools.pods.endpoints`). It writes EndpointSlices for the Services eds watches (ready ->
ready, stopping -> terminating, as the controller does), turns them into endpoints with eds's
own mapping (:func:`eds.sources.endpointslice.endpoints`) and hands them to eds through its
endpoints-file source: eds's container is the one whose environment the runner changes
(``INFERLINE_EDS_SOURCE=file``), so the rest of the pipeline runs the rendered configuration.

What it does not map (a real cluster proves these): HorizontalPodAutoscalers,
PodDisruptionBudgets, NetworkPolicies, RBAC and service-account tokens, the scheduler
(affinity, topology spread, priority), restarts (a failed liveness probe or a dead container
is reported, not restarted), resource requests, ``sizeLimit`` of disk emptyDirs, and every
kind but Deployment, ConfigMap, Secret and Service.
"""
