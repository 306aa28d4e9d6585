"""python -m eds: the xDS control plane (ADS, EDS, CDS, LDS, RDS) for Envoy and gRPC clients."""

from eds import app
from eds.config import PREFIX, Config
from inferline.main import run

if __name__ == "__main__":
    run("eds", Config, PREFIX, app.start, __doc__)
