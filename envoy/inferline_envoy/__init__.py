"""The data plane's side of xDS: Envoy's bootstrap and gRPC's.

The one Envoy template (``envoy.template.yaml``, package data; :mod:`.template`) leaves open
what :mod:`.params` holds, for the local stack or Kubernetes; :mod:`.render` makes the bootstrap
of it, :mod:`.sds` the certificate files beside it, :mod:`.binary` checks it with the real
binary, and :mod:`.config` is their command line. :mod:`.admin` reads Envoy's admin API
(endpoints as Envoy sees them, drained, routable); :mod:`.proxyless` writes gRPC's xDS bootstrap
for clients that dial ``xds:///<cluster>`` with no Envoy in between.
"""
