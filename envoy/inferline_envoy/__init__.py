"""The data plane's side of xDS: Envoy's bootstrap and gRPC's.

:mod:`.config` renders the one Envoy template (``envoy.template.yaml``, package data) for the
local stack or Kubernetes and validates it with the real binary; :mod:`.admin` reads Envoy's
admin API (endpoints as Envoy sees them, drained, routable); :mod:`.proxyless` writes gRPC's
xDS bootstrap for clients that dial ``xds:///<cluster>`` with no Envoy in between.
"""
