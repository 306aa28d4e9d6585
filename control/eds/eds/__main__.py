"""python -m eds (the image's ``inferline-eds``): the xDS control plane (ADS, EDS, CDS, LDS, RDS)
for Envoy and gRPC clients."""

from opentelemetry.sdk.trace.sampling import ALWAYS_ON

from eds import app
from eds.config import PREFIX, Config
from inferline.main import run


def main() -> None:
    # Its spans are its pushes (server.push_span), a few per scaling event: all of them traced.
    run("eds", Config, PREFIX, app.start, __doc__, sampler=ALWAYS_ON)


if __name__ == "__main__":
    main()
